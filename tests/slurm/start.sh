#!/usr/bin/env bash
# start.sh [STATE]: a one-node SLURM on this machine for the sweep tests (tests/test_slurm.py, `make slurm-check`):
# munged, MariaDB, slurmdbd (so that sacct answers), slurmctld and slurmd, from Debian's packages (installed when
# absent), started by hand (no systemd), every config, log, socket and database under STATE (default
# /tmp/longctx-slurm). Running it again keeps the daemons that are up. Writes STATE/env.sh (SLURM_CONF, PATH) for
# the client commands. Every wait has a limit and says what it waited for. Needs root.
set -euo pipefail

STATE=$(realpath -m "${1:-/tmp/longctx-slurm}")
ETC=$STATE/etc RUN=$STATE/run LOG=$STATE/log
DB_PORT=3307  # not MariaDB's 3306: a database server of the machine's own is left alone
HOST=$(hostname -s)
export PATH=$PATH:/usr/sbin:/sbin
say() { echo "[slurm $(date +%T)] $*" >&2; }
fail() {
  say "ERROR: $*"
  for f in "$LOG"/*.log; do [ -f "$f" ] && { echo "--- $f" >&2; tail -n 15 "$f" >&2; }; done
  exit 1
}
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }  # the daemon of this pid file runs
until_ok() {  # until_ok SECONDS WHAT COMMAND...: poll COMMAND, give up after SECONDS
  local limit=$1 what=$2 end=$((SECONDS + $1))
  shift 2
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $end ] || fail "no $what within ${limit} s"
    sleep 0.2
  done
}
[ "$(id -u)" = 0 ] || { say "needs root (it installs packages and starts daemons)"; exit 2; }

# 1. Debian's packages, when a program is missing (the first time on a fresh machine: about a minute)
missing=()
for pair in munged:munge mariadbd:mariadb-server slurmdbd:slurmdbd slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || { say "needs apt-get to install ${missing[*]}"; exit 2; }
  say "installing ${missing[*]} slurm-wlm-mysql-plugin"
  # without systemd, the packages' scripts would start munge and MariaDB on their default paths: forbidden here
  policy=0
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; policy=1; }
  export DEBIAN_FRONTEND=noninteractive
  timeout 300 apt-get update -q >&2 || fail "apt-get update failed"
  timeout 900 apt-get install -y -q --no-install-recommends "${missing[@]}" slurm-wlm-mysql-plugin >&2 || fail "apt-get install failed"
  [ $policy = 0 ] || rm -f /usr/sbin/policy-rc.d
fi
mkdir -p "$ETC" "$RUN" "$LOG" "$STATE/spool" "$STATE/ctld" "$STATE/mysql"
chmod 700 "$ETC"
chmod 755 "$RUN"  # munged's socket folder must be searchable by others

# 2. The configuration: this machine's cores and memory (less a tenth), two partitions without GPUs
MEM=$(free -m | awk '/^Mem:/ {print $2}')
MEM=$((MEM - MEM / 10))
TOPOLOGY=$(slurmd -C | head -1 | grep -o 'CPUs=.*ThreadsPerCore=[0-9]*')
cat >"$ETC/slurm.conf.new" <<CONF
ClusterName=longctx
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$RUN/munge.socket
CredType=cred/munge
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
# cores and memory are what a job takes: a job without --mem gets a core's share, so tasks run side by side
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((MEM / $(nproc)))
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
# sacct and sacctmgr read the munge socket for slurmdbd from here, not from AuthInfo
AccountingStoragePass=socket=$RUN/munge.socket
# an account that slurmdbd does not know is refused at submission, as on a real cluster
AccountingStorageEnforce=associations
JobAcctGatherType=jobacct_gather/linux
ReturnToService=2
# a request no node of the partition can meet (more cores than it has) is refused at submission, not queued forever
EnforcePartLimits=ALL
# a test sees a time limit and a failure in seconds
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=5
KillWait=2
OverTimeLimit=0
MinJobAge=300
NodeName=$HOST NodeAddr=127.0.0.1 $TOPOLOGY RealMemory=$MEM State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
PartitionName=cpu Nodes=$HOST Default=NO MaxTime=INFINITE State=UP
CONF
if [ -f "$ETC/slurm.conf" ] && ! cmp -s "$ETC/slurm.conf" "$ETC/slurm.conf.new"; then
  say "the configuration changed: restarting"
  bash "$(dirname "$0")/stop.sh" "$STATE"
fi
mv "$ETC/slurm.conf.new" "$ETC/slurm.conf"
cat >"$ETC/slurmdbd.conf" <<CONF
AuthType=auth/munge
AuthInfo=socket=$RUN/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
CONF
chmod 600 "$ETC/slurmdbd.conf"  # slurmdbd refuses a configuration others can read (it holds a password)
export SLURM_CONF=$ETC/slurm.conf  # slurmdbd reads slurmdbd.conf beside it
printf 'export SLURM_CONF=%s\nexport PATH=$PATH:/usr/sbin\n' "$SLURM_CONF" >"$STATE/env.sh"

# 3. munged, with a key of its own
[ -s "$ETC/munge.key" ] || dd if=/dev/urandom of="$ETC/munge.key" bs=1024 count=1 status=none
chmod 600 "$ETC/munge.key"
if ! alive "$RUN/munged.pid"; then
  say "starting munged"
  rm -f "$RUN/munge.socket" "$RUN/munge.socket.lock"
  munged --key-file="$ETC/munge.key" --socket="$RUN/munge.socket" --pid-file="$RUN/munged.pid" \
    --log-file="$LOG/munged.log" --seed-file="$RUN/munged.seed" </dev/null >>"$LOG/munged.log" 2>&1 || fail "munged did not start"
fi
munge_ok() { munge -n --socket="$RUN/munge.socket" | unmunge --socket="$RUN/munge.socket"; }
until_ok 10 "munge credential" munge_ok

# 4. MariaDB for slurmdbd: its own data folder, socket and port
SQL=(mariadb --no-defaults --socket="$RUN/mysqld.sock" -uroot)
if [ ! -d "$STATE/mysql/mysql" ]; then
  mariadb-install-db --no-defaults --datadir="$STATE/mysql" --user=root --skip-test-db \
    --auth-root-authentication-method=socket >"$LOG/mariadb-install.log" 2>&1 || fail "mariadb-install-db failed"
fi
if ! alive "$RUN/mysqld.pid"; then
  say "starting MariaDB"
  setsid nohup mariadbd --no-defaults --user=root --datadir="$STATE/mysql" --socket="$RUN/mysqld.sock" \
    --pid-file="$RUN/mysqld.pid" --bind-address=127.0.0.1 --port=$DB_PORT --skip-name-resolve \
    --innodb-buffer-pool-size=512M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 \
    --log-error="$LOG/mariadb.log" </dev/null >>"$LOG/mariadb.log" 2>&1 &
fi
until_ok 60 "MariaDB answer" "${SQL[@]}" -e 'SELECT 1'
"${SQL[@]}" -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
  CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
  GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" || fail "MariaDB's database for slurmdbd"

# 5. slurmdbd, the cluster and its users in it
if ! alive "$RUN/slurmdbd.pid"; then
  say "starting slurmdbd"
  slurmdbd </dev/null >>"$LOG/slurmdbd.log" 2>&1 || fail "slurmdbd did not start"
fi
until_ok 60 "slurmdbd answer" sacctmgr -n show cluster
if [ -z "$(sacctmgr -n -P show cluster longctx format=cluster)" ]; then
  sacctmgr -i add cluster longctx >&2 || fail "sacctmgr add cluster"  # with account root, user root in it
fi

# 6. slurmctld and slurmd, until the node is idle
if ! alive "$RUN/slurmctld.pid"; then
  say "starting slurmctld"
  slurmctld -f "$SLURM_CONF" </dev/null >>"$LOG/slurmctld.log" 2>&1 || fail "slurmctld did not start"
fi
until_ok 30 "slurmctld answer" bash -c 'scontrol ping | grep -q UP'
if ! alive "$RUN/slurmd.pid"; then
  say "starting slurmd"
  slurmd -f "$SLURM_CONF" </dev/null >>"$LOG/slurmd.log" 2>&1 || fail "slurmd did not start"
fi
idle() { [ "$(sinfo -h -N -n "$HOST" -o %T | sort -u)" = idle ]; }
until_ok 60 "idle node $HOST" idle
say "up: one node, $(nproc) cores, $MEM MiB (state in $STATE)"
