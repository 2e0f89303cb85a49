# Shell helpers shared by the bench scripts (sourced, not run).

# utime+stime of process $1 in clock ticks, all threads (/proc/PID/stat
# fields 14 and 15, counted after the comm, which may hold spaces).
proc_cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' /proc/"$1"/stat; }
