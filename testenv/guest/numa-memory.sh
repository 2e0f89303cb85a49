#!/bin/sh
# Guest side of crates/cli/tests/numa_memory.rs, run by /init (run=) in a
# two-node guest (start-vm.sh --numa2) that also holds /bin/stealscope,
# /bin/numa_hog and /bin/numa-memory.toml (--extra). Every result line starts
# with "NUMAMEM " so the test can pick them out of the serial log.
#
# Kernel command line: numamem_hog=MIB (size of the process to move, default 24)
#
#   (a) a filler bound to node 1 leaves about MIB free there; moving the hog
#       (MIB on node 0) to node 1 must be refused and move nothing;
#   (b) with the filler gone the same move must go through in steps;
#   (c) a second hog whose memory stays bound to node 0 by its own policy
#       (numa_maps "bind:0"): moving it to node 1 must be refused, naming
#       the policy, and move nothing, although node 1 has room.

hog_mib=24
# shellcheck disable=SC2013  # words, as /init reads them
for arg in $(cat /proc/cmdline); do
    case "$arg" in numamem_hog=*) hog_mib=${arg#numamem_hog=} ;; esac
done

mark() { echo "NUMAMEM $*"; }
kb() { awk -v k="$2:" '$3 == k { print $4 }' "/sys/devices/system/node/node$1/meminfo"; }
nodes() { mark "$1 node0 total_kb=$(kb 0 MemTotal) free_kb=$(kb 0 MemFree) node1 total_kb=$(kb 1 MemTotal) free_kb=$(kb 1 MemFree)"; }
numa_maps() {
    mark "$1-NUMA-MAPS-BEGIN"
    cat "/proc/$hog/numa_maps"
    mark "$1-NUMA-MAPS-END"
}
# start NAME NODE MIB [keep-bind]: runs numa_hog in the background, waits for READY
# (60 s at most), leaves its pid in $started.
start() {
    /bin/numa_hog "$2" "$3" ${4:+"$4"} >"/tmp/$1.out" 2>&1 &
    started=$!
    i=0
    until grep -q READY "/tmp/$1.out"; do
        i=$((i + 1))
        if [ "$i" -gt 600 ] || ! kill -0 "$started" 2>/dev/null; then
            mark "ERROR $1 not ready: $(cat "/tmp/$1.out")"
            exit 1
        fi
        sleep 0.1
    done
    mark "STARTED $1 $(cat "/tmp/$1.out")"
}
# move NAME: stealscope's exit code, stderr lines and stdout (JSON) as one line.
move() {
    /bin/stealscope place move-memory --pid "$hog" --node 1 --yes --json \
        --config /bin/numa-memory.toml >"/tmp/$1.out" 2>"/tmp/$1.err"
    mark "$1-RC $?"
    while IFS= read -r line; do mark "$1-ERR $line"; done <"/tmp/$1.err"
    mark "$1-JSON $(tr -d '\n' <"/tmp/$1.out")"
}

nodes BOOT
start hog 0 "$hog_mib"
hog=$started
# Leave about hog_mib free on node 1.
fill_mib=$(( $(kb 1 MemFree) / 1024 - hog_mib ))
start filler 1 "$fill_mib"
filler=$started
numa_maps A-BEFORE
nodes A
move A
numa_maps A-AFTER

kill "$filler"
wait "$filler" 2>/dev/null
sleep 1
nodes B
numa_maps B-BEFORE
move B
numa_maps B-AFTER
nodes B-AFTER

start bound 0 8 keep-bind
hog=$started
numa_maps C-BEFORE
nodes C
move C
numa_maps C-AFTER
mark DONE
