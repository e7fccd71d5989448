"""Writes docs/cli.md: the prose below plus every --help of the CLI, verbatim.

    /usr/bin/python3 scripts/gen_cli_doc.py build-test/shardpoint docs/cli.md

CliConventionsTest.DocsCliMdHoldsEveryHelpText checks the page against the binary."""

import subprocess
import sys

cli = sys.argv[1]


def h(args):
    return subprocess.run([cli] + args.split(), capture_output=True, text=True, check=True).stdout


prose_top = """# The `shardpoint` command

`shardpoint` inspects, verifies, compares and converts checkpoints without a
training job. Where it comes from: `build*/shardpoint` (both README commands
build it; the demo prints its exact path), `shardpoint` on `PATH` after
`cmake --install`, the `.deb`, or `pip install` (an entry point that runs the
binary bundled in the package). Code: `tools/shardpoint.cc` (parsing and the
conventions below) and one file per subcommand in `tools/lib/`, on the public
API only (`include/shardpoint/`: `verify.h` for inspect and verify, `hf.h`
for the Hugging Face commands).

## Conventions

- **Exit codes**, every subcommand: `0` done and everything checked out; `1`
  done and found something (verify: faults; diff: differences); `2` could not
  do it: a usage error (the message and the usage go to **stderr**, nothing to
  stdout) or an input that cannot be read (no manifest, a garbage manifest,
  an unknown mapping). With several directories the worst one wins: an
  unreadable directory is reported and the others are still processed.
- `--version` prints `shardpoint <version>` (the CMake project version, the
  same as `shardpoint.__version__` in Python).
- `--help` on every subcommand, with at least one example.
- `inspect` and `verify` take several directories (`ckpt/iter_*`).
- `--json` (inspect, verify): one line of JSON per directory, in argument
  order (JSON Lines; `jq` reads it as is). Nothing else goes to stdout: no
  progress bar, no summary. `inspect`: `{"dir", "kind", "manifest"}` (kind: `shardpoint` or
  `pytorch_dcp`, as `DetectCheckpointKind` decides), the manifest as
  in [format.md](format.md). `verify`: `{"dir", "ok", "tensors",
  "chunks_checked", "objects_checked", "bytes_checked", "files", "seconds",
  "faults": [{"kind": "chunk" | "object" | "tiling" | "file_header", "key",
  "chunk", "object_index", "file", "begin", "end", "message"}]}`, or
  `{"dir", "ok": false, "error"}` when the checkpoint cannot be read (the
  error also goes to stderr).
- `-q, --quiet` (verify, export-hf, convert, diff): no progress bar and no
  summary; errors, and verify's `FAULT:` lines with one `FAILED: DIR: N
  fault(s)` line per failing checkpoint, only. The exit code says the rest.
- Progress bars (verify, export-hf, convert) are drawn on stderr only when it
  is a terminal, and never with `--json` or `--quiet`.
- Outputs (export-hf, convert, convert --to dcp) are written into
  `OUT.partial` and renamed to `OUT` once complete and durable, so `OUT` is
  never half written, whatever kills the command. An existing `OUT` that is
  not an empty directory is refused (exit 2, naming it) unless `--overwrite`,
  which replaces it whole in one atomic swap ([huggingface.md](huggingface.md#cli)).
- `s3://bucket/prefix` goes wherever a directory does, in every subcommand
  ([object-store.md](object-store.md)): endpoint, region and credentials from
  the `AWS_*` variables and `~/.aws` profiles, or `--endpoint-url`,
  `--region`, `--addressing-style path|virtual` and `--profile` (credentials
  only through the environment or a profile, never on a command line). An
  output on an object store is written in place (there is no rename); a
  prefix that holds anything is refused, even with `--overwrite`.

## Help texts

What each `--help` prints, verbatim (the test `CliConventionsTest.DocsCliMdHoldsEveryHelpText`
fails when this page and the binary disagree; regenerate it with
`/usr/bin/python3 scripts/gen_cli_doc.py build-test/shardpoint docs/cli.md`).

"""
out = prose_top
for args in ["--help", "inspect --help", "verify --help", "export-hf --help", "convert --help",
             "diff --help"]:
    out += "```text\n$ shardpoint " + args + "\n" + h(args) + "```\n\n"
out += """## Examples

```sh
shardpoint verify --json ckpt/iter_* | jq -c 'select(.ok | not) | {dir, faults: [.faults[].message]}'
shardpoint inspect --json ckpt/iter_0001000 | jq -r '.manifest.tensors[] | .key'
shardpoint verify -q ckpt/iter_* && echo "all good"
```

Hugging Face mappings and what export-hf, convert and diff do:
[huggingface.md](huggingface.md).
"""
open(sys.argv[2], "w").write(out)
