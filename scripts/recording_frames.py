"""What the benchmark scripts read in a recording (docs/recording-format.md):
one copy for bench-record-floor.py and bench-record-steal.py."""
import struct


def saw_vms(path):
    """Whether the recording holds a vCPU table frame (kind 6): VMs found."""
    b = open(path, "rb").read()
    p = 8
    while p + 5 <= len(b):
        n, k = struct.unpack_from("<IB", b, p)
        if k == 6:
            return True
        p += 9 + n
    return False
