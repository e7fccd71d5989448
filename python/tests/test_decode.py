"""Stored values that the Python package cannot decode are DataLossErrors naming the checkpoint.

The C++ API stores any string as an object, the common state or the metadata: a
checkpoint written by it (or damaged) may hold text that is not UTF-8, not JSON,
or JSON nested too deeply for the parser. Each must come back as
shardpoint.DataLossError naming the checkpoint and the value, never as a
JSONDecodeError, UnicodeDecodeError or RecursionError.
"""

import pytest

import shardpoint as sp
from shardpoint import _shardpoint as _C

DEEP = b"[" * 100000 + b"]" * 100000  # valid JSON, too deep for json.loads (RecursionError)
BAD = {
    "not JSON": (b"{'single': quotes}", "corrupt JSON"),
    "not UTF-8": (b'"\xff\xfe"', "not UTF-8"),
    "too deep": (DEEP, "JSON nested too deeply"),
}


def _save_raw(path, *, objects=(), common=None, metadata=b""):
    """A checkpoint written through the C++ API, as any C++ program could."""
    st = _C.State()
    st.objects = [_C.Object(k, v) for k, v in objects]
    st.common = common
    st.metadata_json = metadata  # any bytes: the C++ State holds a std::string
    _C.save(st, path, sp.single())


@pytest.mark.parametrize("case", sorted(BAD))
def test_object_that_cannot_be_decoded(ckpt, case):
    body, reason = BAD[case]
    _save_raw(ckpt, objects=[("cfg", b"J" + body)])
    with pytest.raises(sp.DataLossError) as e:
        sp.load({"cfg": None}, ckpt)
    assert f"object 'cfg' of checkpoint '{ckpt}': {reason}" in str(e.value)
    # the raw bytes are still readable
    t = {"cfg": None}
    sp.load(t, ckpt, raw_objects=True)
    assert t["cfg"] == b"J" + body


@pytest.mark.parametrize("case", sorted(BAD))
def test_common_that_cannot_be_decoded(ckpt, case):
    body, reason = BAD[case]
    _save_raw(ckpt, common=b"J" + body)
    with pytest.raises(sp.DataLossError) as e:
        sp.load({}, ckpt)
    assert f"common state of checkpoint '{ckpt}': {reason}" in str(e.value)
    assert sp.load({}, ckpt, common=False).common is None


@pytest.mark.parametrize("case", sorted(BAD) + ["not an object"])
def test_metadata_that_cannot_be_decoded(ckpt, case):
    body, reason = BAD[case] if case in BAD else (b"[1, 2]", "a JSON list, not an object")
    try:
        _save_raw(ckpt, metadata=body)
    except sp.InvalidArgumentError:
        # C++ Save validates metadata_json: such a checkpoint comes only from another
        # writer or an older version. The reader is checked on the same bytes.
        from types import SimpleNamespace

        from shardpoint._checkpoint import decode_metadata
        with pytest.raises(sp.DataLossError) as e:
            decode_metadata(SimpleNamespace(metadata_bytes=body), ckpt)
    else:
        with pytest.raises(sp.DataLossError) as e:
            sp.load({}, ckpt)
        with pytest.raises(sp.DataLossError):
            sp.metadata(ckpt)
    assert f"metadata of checkpoint '{ckpt}': {reason}" in str(e.value)


def test_unknown_tag_names_checkpoint(ckpt):
    _save_raw(ckpt, objects=[("x", b"Zjunk")])
    with pytest.raises(sp.DataLossError, match=f"object 'x' of checkpoint '{ckpt}' was not "
                                               "written by the shardpoint Python package"):
        sp.load({"x": None}, ckpt)
