# Sourced by start-vm.sh and stop-vm.sh.
#
# alive PID: PID exists and has not exited. A zombie has: qemu is daemonized,
# so its parent is PID 1, and this machine's init (process_api) reaps orphans
# only every ~2 s, later under load. `kill -0` succeeds on a zombie, which made
# a VM that had quit look as if it ignored QMP quit, SIGTERM and SIGKILL (the
# soak's "stall"), cost every stop ~1.7 s, and would let start-vm.sh wait its
# whole timeout for a qemu that died at once.
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    case ${stat%% *} in Z | X) return 1 ;; esac
}
