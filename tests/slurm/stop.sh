#!/usr/bin/env bash
# stop.sh [STATE]: stop the one-node SLURM that start.sh started in STATE (default /tmp/longctx-slurm): its jobs
# cancelled first, then slurmd, slurmctld, slurmdbd, MariaDB and munged, each by its pid file, each given a few
# seconds before SIGKILL. Nothing of it is left running; its state stays for the next start.
set -euo pipefail

STATE=$(realpath -m "${1:-/tmp/longctx-slurm}")
RUN=$STATE/run
export PATH=$PATH:/usr/sbin:/sbin SLURM_CONF=$STATE/etc/slurm.conf
say() { echo "[slurm $(date +%T)] $*" >&2; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
stop() {  # stop NAME PIDFILE SECONDS: SIGTERM, then SIGKILL after SECONDS
  local pid
  alive "$2" || { rm -f "$2"; return 0; }
  pid=$(cat "$2")
  say "stopping $1 ($pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq $(($3 * 5))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -0 "$pid" 2>/dev/null && { say "$1 still running after $3 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
  rm -f "$2"
}
tree() {  # tree PID...: the processes and all their descendants
  local todo=("$@") pid
  while [ ${#todo[@]} -gt 0 ]; do
    pid=${todo[0]}
    todo=("${todo[@]:1}" $(pgrep -P "$pid" || true))
    echo "$pid"
  done
}
steps() {  # this cluster's job steps: slurmstepd processes started with its SLURM_CONF
  for pid in $(pgrep -x slurmstepd || true); do
    tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$SLURM_CONF" && echo "$pid"
  done
  return 0
}

if alive "$RUN/slurmctld.pid" && jobs=$(timeout 10 squeue -h -o %i 2>/dev/null) && [ -n "$jobs" ]; then
  say "cancelling $(echo $jobs)"
  timeout 10 scancel $jobs 2>/dev/null || true
  for _ in $(seq 50); do [ -z "$(steps)" ] && break; sleep 0.2; done
fi
stop slurmd "$RUN/slurmd.pid" 10
stop slurmctld "$RUN/slurmctld.pid" 10
if left=$(steps) && [ -n "$left" ]; then  # steps of a controller that was already gone: their process trees
  say "killing the job steps left: $(echo $left)"
  kill -KILL $(tree $left) 2>/dev/null || true
fi
stop slurmdbd "$RUN/slurmdbd.pid" 10
stop MariaDB "$RUN/mysqld.pid" 30  # InnoDB's clean shutdown takes a few seconds
stop munged "$RUN/munged.pid" 5
say "stopped"
