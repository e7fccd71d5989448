"""What the benchmark measures about a process: I/O counters, resident memory, the page cache."""

import os


def io_counters():
    """/proc/self/io of this process (all its threads): rchar (bytes through read
    syscalls; gloo's socket receives do not show up in it), read_bytes (bytes fetched from storage, page
    faults of mmap and O_DIRECT included), wchar, write_bytes."""
    out = {}
    with open("/proc/self/io") as f:
        for line in f:
            name, value = line.split(":")
            out[name] = int(value)
    return out


def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def rss_bytes():
    return _status("VmRSS")


def peak_rss_bytes():
    return _status("VmHWM")


def reset_peak_rss():
    """Resets VmHWM to the current RSS (Linux: `5` in /proc/PID/clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def drop_page_cache(mode, paths):
    """mode "all": writes back and drops the whole page cache (needs root; where
    refused, falls back to "files"); "files": evicts the files under `paths`
    with POSIX_FADV_DONTNEED. Returns what it did."""
    os.sync()
    if mode == "all":
        try:
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3")
            return "dropped (sync; echo 3 > /proc/sys/vm/drop_caches)"
        except OSError:
            pass
    for top in paths:
        for root, _, files in os.walk(top):
            for name in files:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)
    return "files evicted (POSIX_FADV_DONTNEED)"


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def touch_pages(nbytes):
    """Touches one byte per 4 KiB page of `nbytes` of fresh memory, then frees it: the
    next allocations reuse pages the guest holds (bench/free_page_probe.py times the same
    touch, the freeing left out)."""
    import numpy as np
    b = np.empty(nbytes, dtype=np.uint8)
    b[::4096] = 1
    del b
