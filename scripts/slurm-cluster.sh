#!/usr/bin/env bash
# A single-node Slurm cluster on localhost with 4 fake GPUs, for development and CI (issue 4).
#
#   scripts/slurm-cluster.sh up [FLAGS]  install Debian's packages if missing, write /etc/slurm, start munged,
#                                     mariadb, slurmdbd, slurmctld, slurmd; wait until a job runs and sacct
#                                     sees it. On a healthy cluster it only checks (a second or so).
#   scripts/slurm-cluster.sh down     end every job, stop every daemon; idempotent.
#   scripts/slurm-cluster.sh status   print what runs, the variant and sinfo; exit 0 only when the cluster
#                                     takes jobs.
#
# Variants, so that the tests also see clusters unlike the default one. `up` with no flags is the default
# cluster (one partition `debug` with the node's 4 GPUs, accounting, no time limit). Flags combine; each
# `up` applies exactly the flags it is given, restarting slurmctld and slurmd when the configuration
# changes (about 5 s; queued and running jobs stay):
#   --no-accounting           AccountingStorageType=accounting_storage/none, slurmdbd stopped: sacct fails.
#   --cpu-only                the node has no GPUs (no Gres).
#   --gpu-partition           two partitions: `cpu` (the default) whose only node, cpu0, has no GPUs and
#                             never comes up (DOWN), and `gpu` with the real node and its GPUs.
#   --max-time=MIN            every partition's MaxTime, in minutes (default INFINITE).
#   --enforce-part-limits=X   EnforcePartLimits=ALL|ANY|NO (default: unset, which Slurm takes as NO).
#   --max-array-size=N        MaxArraySize (default 1001, or SLURM_MAX_ARRAY_SIZE).
#   --qos-limit=N             limits enforced (AccountingStorageEnforce=associations,limits,qos) and a plain user
#                             `sweepit-user` (created if missing) whose default QoS `capped` has
#                             MaxSubmitJobsPerUser=N: sbatch refuses that user's jobs beyond N queued or running. Root's
#                             jobs are never held to limits, so tests submit as that user.
#   --site                    a site's own names, checked by Slurm: a second partition `long` (not the default) on
#                             the same node, a second account `lab` and a QoS `short` that root may use
#                             (AccountingStorageEnforce=associations,qos). The docs' "Slurm on your cluster" runs on it.
#
# Environment:
#   SLURM_MAX_ARRAY_SIZE=5    cluster's MaxArraySize (default 1001); `up` applies a change by restarting
#                             slurmctld (a few seconds; queued and running jobs stay).
#   SLURM_UP_TIMEOUT_S=90     how long `up` waits for each daemon and for the first job.
#
# Needs root and no systemd: every daemon is started by hand and found again through its pid file.
set -euo pipefail

CLUSTER=sweepit
NODE=$(hostname -s)
N_GPUS=4
N_CPUS=16          # advertised (SlurmdParameters=config_overrides): 4 GPU tasks plus arrays on a 2-core machine
REAL_MEMORY_MB=16000
MAX_ARRAY_SIZE=${SLURM_MAX_ARRAY_SIZE:-1001}
TIMEOUT_S=${SLURM_UP_TIMEOUT_S:-90}
# The variant (see above), set by parse_flags from `up`'s flags.
ACCOUNTING=1
CPU_ONLY=0
GPU_PARTITION=0
MAX_TIME=INFINITE
ENFORCE_PART_LIMITS=""
VARIANT=default
SITE=0         # --site: partition long, account lab, QoS short
QOS_LIMIT=""   # --qos-limit=N: MaxSubmitJobsPerUser of QoS $QOS_NAME, the default QoS of $QOS_USER
QOS_NAME=capped
QOS_USER=sweepit-user
FAKE_NODE=cpu0 # --gpu-partition: the default partition's only node, without GPUs, never registered

ETC=/etc/slurm
LOG_DIR=/var/log/slurm
STATE_DIR=/var/spool/slurmctld
SLURMD_SPOOL=/var/spool/slurmd
DB_LOG=/var/log/mysql/error.log
MUNGE_LOG=/var/log/munge/munged.log
PACKAGES=(slurmctld slurmd slurm-client munge slurmdbd mariadb-server)

log() { printf 'slurm-cluster: %s\n' "$*"; }

die() {
  printf 'slurm-cluster: error: %s\n' "$*" >&2
  exit 1
}

# The last lines of every daemon's log, for a failure message.
print_log_tails() {
  local f
  for f in "$LOG_DIR/slurmctld.log" "$LOG_DIR/slurmd.log" "$LOG_DIR/slurmdbd.log" "$DB_LOG" "$MUNGE_LOG"; do
    [[ -r $f ]] || continue
    printf '\n==> %s <==\n' "$f" >&2
    tail -n 15 "$f" >&2
  done
}

fail() {
  print_log_tails
  die "$*"
}

# wait_for DESCRIPTION COMMAND...: retry COMMAND every 0.2 s until it succeeds or TIMEOUT_S passes.
wait_for() {
  local what=$1 deadline=$((SECONDS + TIMEOUT_S))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$what: not ready after ${TIMEOUT_S}s (SLURM_UP_TIMEOUT_S)"
    sleep 0.2
  done
}

pidfile_of() {
  case $1 in
  munged) echo /run/munge/munged.pid ;;
  mariadbd) echo /run/mysqld/mysqld.pid ;;
  *) echo "/run/$1.pid" ;;
  esac
}

# A zombie counts as gone: it holds no port and no lock.
running() {
  local stat
  stat=$(ps -o stat= -p "$1" 2>/dev/null) && [[ $stat != Z* ]]
}

pid_alive() {
  local pidfile
  pidfile=$(pidfile_of "$1")
  [[ -s $pidfile ]] && running "$(cat "$pidfile")"
}

# stop_daemons NAME...: SIGTERM to each (its pid file, and any process of that exact name), all at once;
# SIGKILL to what still runs after 15 s.
stop_daemons() {
  local name found pids="" pid i
  for name; do
    found=$( { cat "$(pidfile_of "$name")"; pgrep -x "$name"; } 2>/dev/null | sort -u |
      while read -r pid; do if running "$pid"; then printf '%s ' "$pid"; fi; done || true)
    [[ -n $found ]] || continue
    log "stopping $name (pid ${found% })"
    pids+=" $found"
  done
  for pid in $pids; do kill "$pid" 2>/dev/null || true; done
  for ((i = 0; i < 75; i++)); do
    pids=$(for pid in $pids; do running "$pid" && echo "$pid"; done || true)
    [[ -n $pids ]] || break
    sleep 0.1
  done
  for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
  for name; do rm -f "$(pidfile_of "$name")"; done
}

apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"; }

install_packages() {
  local missing=() p
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep 'ok installed' >/dev/null || missing+=("$p")
  done
  ((${#missing[@]} == 0)) && return 0
  log "installing ${missing[*]} (about 40 s)"
  compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null || apt-get update -qq
  # Keep the packages' init scripts from starting daemons this script would not know about.
  local policy=/usr/sbin/policy-rc.d created_policy=0
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && created_policy=1
  fi
  local apt_log=/var/log/slurm-cluster-apt.log status=0
  apt_install "${missing[@]}" >"$apt_log" 2>&1 || status=$?
  if ((status != 0)); then # stale package lists name versions the mirror no longer has
    { apt-get update -q && apt_install "${missing[@]}"; } >>"$apt_log" 2>&1 && status=0
  fi
  if ((created_policy)); then rm -f "$policy"; fi
  ((status == 0)) || { tail -n 20 "$apt_log" >&2; die "apt-get install ${missing[*]} failed (log: $apt_log)"; }
}

render_slurm_conf() {
  local gres="Gres=gpu:$N_GPUS" accounting
  ((CPU_ONLY)) && gres=""
  if ((ACCOUNTING)); then
    accounting=$'AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=127.0.0.1\nAccountingStorageTRES=gres/gpu'
  else
    accounting=AccountingStorageType=accounting_storage/none
  fi
  cat <<EOF
# Written by scripts/slurm-cluster.sh: a one-node development cluster with fake GPUs.
# Variant: $VARIANT
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
KillWait=5
InactiveLimit=0
MailProg=/bin/true
MinJobAge=300
MaxArraySize=$MAX_ARRAY_SIZE
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=2
StateSaveLocation=$STATE_DIR
SlurmdSpoolDir=$SLURMD_SPOOL
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
$accounting
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=30
JobCompType=jobcomp/none
EOF
  if [[ -n $ENFORCE_PART_LIMITS ]]; then echo "EnforcePartLimits=$ENFORCE_PART_LIMITS"; fi
  if [[ -n $QOS_LIMIT ]]; then echo "AccountingStorageEnforce=associations,limits,qos"
  elif ((SITE)); then echo "AccountingStorageEnforce=associations,qos"; fi
  echo "NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$N_CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$N_CPUS" \
    "ThreadsPerCore=1 RealMemory=$REAL_MEMORY_MB${gres:+ $gres} State=UNKNOWN"
  if ((GPU_PARTITION)); then
    # Port 9 (discard) serves no slurmd: slurmctld lists the node DOWN, and sinfo a real GPU-less partition.
    cat <<EOF
NodeName=$FAKE_NODE NodeAddr=127.0.0.1 Port=9 CPUs=4 RealMemory=4000 State=DOWN Reason=slurm-cluster.sh:never-up
PartitionName=cpu Nodes=$FAKE_NODE Default=YES MaxTime=$MAX_TIME State=UP
PartitionName=gpu Nodes=$NODE MaxTime=$MAX_TIME State=UP
EOF
  else
    echo "PartitionName=debug Nodes=$NODE Default=YES MaxTime=$MAX_TIME State=UP"
  fi
  if ((SITE)); then echo "PartitionName=long Nodes=$NODE MaxTime=$MAX_TIME State=UP"; fi
}

# The partition the smoke test's job runs in: under --gpu-partition the default one has no usable node.
smoke_partition() { if ((GPU_PARTITION)); then echo gpu; else echo debug; fi; }

# Whether the slurm.conf in place keeps accounting (status goes by the variant running, not by flags).
conf_has_accounting() { ! grep -qx 'AccountingStorageType=accounting_storage/none' "$ETC/slurm.conf" 2>/dev/null; }

parse_flags() {
  local flag given=()
  for flag; do
    case $flag in
    --no-accounting) ACCOUNTING=0 ;;
    --cpu-only) CPU_ONLY=1 ;;
    --gpu-partition) GPU_PARTITION=1 ;;
    --max-time=*) MAX_TIME=${flag#*=} ;;
    --enforce-part-limits=*) ENFORCE_PART_LIMITS=${flag#*=} ;;
    --max-array-size=*) MAX_ARRAY_SIZE=${flag#*=} ;;
    --qos-limit=*) QOS_LIMIT=${flag#*=} ;;
    --site) SITE=1 ;;
    *) die "up takes --no-accounting, --cpu-only, --gpu-partition, --max-time=MIN, --enforce-part-limits=ALL|ANY|NO, --max-array-size=N, --qos-limit=N and --site, but got '$flag'" ;;
    esac
    given+=("$flag")
  done
  [[ $MAX_TIME =~ ^([0-9]+|INFINITE)$ ]] || die "--max-time must be a number of minutes, but got '$MAX_TIME'"
  [[ $ENFORCE_PART_LIMITS =~ ^(|ALL|ANY|NO)$ ]] ||
    die "--enforce-part-limits must be ALL, ANY or NO, but got '$ENFORCE_PART_LIMITS'"
  [[ $MAX_ARRAY_SIZE =~ ^[1-9][0-9]*$ ]] || die "--max-array-size must be a positive number, but got '$MAX_ARRAY_SIZE'"
  [[ $QOS_LIMIT =~ ^([1-9][0-9]*)?$ ]] || die "--qos-limit must be a positive number, but got '$QOS_LIMIT'"
  if [[ -n $QOS_LIMIT ]] && ((ACCOUNTING == 0)); then die "--qos-limit needs accounting: drop --no-accounting"; fi
  if ((SITE && ACCOUNTING == 0)); then die "--site needs accounting: drop --no-accounting"; fi
  if ((${#given[@]})); then VARIANT=${given[*]}; fi
}

render_gres_conf() {
  printf '# Written by scripts/slurm-cluster.sh: fake GPUs are character devices (mknod c 1 3).\n'
  if ((CPU_ONLY == 0)); then printf 'NodeName=%s Name=gpu File=/dev/fakegpu[0-%d]\n' "$NODE" $((N_GPUS - 1)); fi
}

render_slurmdbd_conf() {
  cat <<EOF
# Written by scripts/slurm-cluster.sh: accounting for the development cluster.
AuthType=auth/munge
DbdHost=$NODE
DbdAddr=127.0.0.1
SlurmUser=root
PidFile=/run/slurmdbd.pid
LogFile=$LOG_DIR/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=$1
StorageLoc=slurm_acct_db
EOF
}

# install_file PATH MODE < content: replace PATH only when its content differs; succeed when it changed.
install_file() {
  local path=$1 mode=$2 tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if [[ -f $path ]] && cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    return 1
  fi
  install -o root -g root -m "$mode" "$tmp" "$path"
  rm -f "$tmp"
}

# Sets SLURM_CONF_CHANGE (none; array: only MaxArraySize changed, slurmctld restarts; full: slurmctld and
# slurmd restart) and DBD_CONF_CHANGED for start_* to act on.
write_configs() {
  local pass before=""
  mkdir -p "$ETC" "$LOG_DIR" "$STATE_DIR" "$SLURMD_SPOOL"
  SLURM_CONF_CHANGE=none DBD_CONF_CHANGED=0
  [[ -f $ETC/slurm.conf ]] && before=$(grep -v '^MaxArraySize=\|^# Variant:' "$ETC/slurm.conf")
  if render_slurm_conf | install_file "$ETC/slurm.conf" 644; then
    SLURM_CONF_CHANGE=full
    [[ $before == "$(grep -v '^MaxArraySize=\|^# Variant:' "$ETC/slurm.conf")" ]] && SLURM_CONF_CHANGE=array
    log "wrote $ETC/slurm.conf (MaxArraySize=$MAX_ARRAY_SIZE)"
  fi
  if render_gres_conf | install_file "$ETC/gres.conf" 644; then
    SLURM_CONF_CHANGE=full
    log "wrote $ETC/gres.conf"
  fi
  # The database password is made once and kept in slurmdbd.conf (mode 600, as slurmdbd demands).
  pass=$(sed -n 's/^StoragePass=//p' "$ETC/slurmdbd.conf" 2>/dev/null || true)
  [[ -n $pass ]] || pass=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
  render_slurmdbd_conf "$pass" | install_file "$ETC/slurmdbd.conf" 600 && DBD_CONF_CHANGED=1
  DB_PASS=$pass
  local i
  for ((i = 0; i < N_GPUS; i++)); do
    [[ -c /dev/fakegpu$i ]] || mknod -m 666 "/dev/fakegpu$i" c 1 3
  done
}

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
  munge_ok && return 0
  stop_daemons munged
  if [[ ! -s /etc/munge/munge.key ]]; then
    log "creating /etc/munge/munge.key"
    mungekey --create --keyfile=/etc/munge/munge.key
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
  install -d -o munge -g munge -m 755 /run/munge
  log "starting munged"
  # As root munged refuses the key; --force takes over a stale socket left by a killed munged.
  runuser -u munge -- /usr/sbin/munged --force
  wait_for munged munge_ok
}

db_ok() { mariadb-admin --silent ping; }

start_mariadb() {
  if ! db_ok >/dev/null 2>&1; then
    if [[ ! -d /var/lib/mysql/mysql ]]; then
      log "initialising /var/lib/mysql"
      mariadb-install-db --user=mysql --datadir=/var/lib/mysql >/dev/null
    fi
    install -d -o mysql -g root -m 755 /run/mysqld
    install -d -o mysql -g adm -m 2750 "$(dirname "$DB_LOG")"
    log "starting mariadb"
    setsid /usr/sbin/mariadbd --user=mysql --log-error="$DB_LOG" </dev/null >/dev/null 2>&1 &
    wait_for mariadb db_ok
  fi
  # Idempotent, and cheap enough to run on every cold start: it keeps the password in step with slurmdbd.conf.
  mariadb -uroot <<EOF
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
EOF
}

dbd_ok() { sacctmgr -n -P list cluster format=cluster; }

start_slurmdbd() {
  if ((DBD_CONF_CHANGED)); then stop_daemons slurmdbd; fi
  if ! { pid_alive slurmdbd && dbd_ok >/dev/null 2>&1; }; then
    stop_daemons slurmdbd
    log "starting slurmdbd"
    slurmdbd
    wait_for slurmdbd dbd_ok
  fi
  # slurmctld needs its cluster in the database before it starts; root gets a default account.
  if ! dbd_ok 2>/dev/null | grep -x "$CLUSTER" >/dev/null; then
    log "registering cluster $CLUSTER and account $CLUSTER in slurmdbd"
    sacctmgr -i -Q add cluster "$CLUSTER" >/dev/null
    sacctmgr -i -Q add account "$CLUSTER" Cluster="$CLUSTER" Description=development Organization=sweepit >/dev/null
    sacctmgr -i -Q add user root Account="$CLUSTER" Cluster="$CLUSTER" >/dev/null
    sacctmgr -i -Q modify user root set DefaultAccount="$CLUSTER" >/dev/null
  fi
}

# --qos-limit=N: the plain user, the QoS with its limit, the user's association under it (idempotent; slurmdbd tells a
# running slurmctld at once).
apply_qos_limit() {
  [[ -n $QOS_LIMIT ]] || return 0
  id -u "$QOS_USER" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash "$QOS_USER"
  if sacctmgr -n -P show qos "$QOS_NAME" format=name | grep -qx "$QOS_NAME"; then
    sacctmgr -i -Q modify qos "$QOS_NAME" set MaxSubmitJobsPerUser="$QOS_LIMIT" >/dev/null
  else
    sacctmgr -i -Q add qos "$QOS_NAME" MaxSubmitJobsPerUser="$QOS_LIMIT" >/dev/null
  fi
  if ! sacctmgr -n -P show assoc where user="$QOS_USER" format=user | grep -qx "$QOS_USER"; then
    sacctmgr -i -Q add user "$QOS_USER" Account="$CLUSTER" Cluster="$CLUSTER" >/dev/null
  fi
  sacctmgr -i -Q modify user "$QOS_USER" set QOS="$QOS_NAME" DefaultQOS="$QOS_NAME" >/dev/null
  log "QoS $QOS_NAME: MaxSubmitJobsPerUser=$QOS_LIMIT, the default QoS of user $QOS_USER (limits enforced)"
}

# --site: the account `lab` and the QoS `short`, open to root beside its defaults (idempotent; they stay in the
# database after the variant, unused, as no other variant enforces associations without creating its own).
apply_site() {
  ((SITE)) || return 0
  if ! sacctmgr -n -P show qos short format=name | grep -qx short; then sacctmgr -i -Q add qos short >/dev/null; fi
  if ! sacctmgr -n -P show account lab format=account | grep -qx lab; then
    sacctmgr -i -Q add account lab Cluster="$CLUSTER" Description=site Organization=sweepit >/dev/null
  fi
  if ! sacctmgr -n -P show assoc where user=root account=lab format=user | grep -qx root; then
    sacctmgr -i -Q add user root Account=lab Cluster="$CLUSTER" >/dev/null
  fi
  sacctmgr -i -Q modify user root set QOS=normal,short >/dev/null
  log "site names: partition long, account lab, QoS short (associations and QoS enforced)"
}

ctld_ok() { scontrol ping 2>/dev/null | grep 'is UP' >/dev/null; }

start_slurmctld() {
  case $SLURM_CONF_CHANGE in
  # slurmctld reads MaxArraySize only when it starts: after `scontrol reconfigure` it shows the new value
  # but still checks arrays against the old one. Queued and running jobs survive the restart.
  array) stop_daemons slurmctld ;;
  full) stop_daemons slurmd slurmctld ;;
  esac
  pid_alive slurmctld && ctld_ok && return 0
  stop_daemons slurmctld
  log "starting slurmctld (state in $STATE_DIR)"
  slurmctld
  wait_for slurmctld ctld_ok
  # A slurmd that kept running would register only at the next ping; reconfigure asks it to now.
  if pid_alive slurmd; then scontrol reconfigure; fi
}

# The node's state flags, e.g. IDLE, MIXED, IDLE+DRAIN, DOWN+NOT_RESPONDING, IDLE+INVALID_REG.
node_state() { scontrol -o show node "$NODE" 2>/dev/null | grep -o 'State=[^ ]*' | head -n1 | cut -d= -f2; }

node_usable() {
  local state
  state=$(node_state)
  [[ $state =~ ^(IDLE|MIXED|ALLOCATED|COMPLETING) ]] && ! [[ $state =~ DRAIN|DOWN|FAIL|INVAL|NOT_RESPONDING|MAINT|RESERVED ]]
}

start_slurmd() {
  local fresh=0
  if ! pid_alive slurmd; then
    stop_daemons slurmd
    log "starting slurmd (node $NODE, $N_CPUS CPUs, $( ((CPU_ONLY)) && echo "no GPUs" || echo "gpu:$N_GPUS"))"
    slurmd
    pgrep -x slurmstepd >/dev/null || fresh=1
  fi
  # After a reboot or a crash slurmctld still lists the jobs that were running, holding their CPUs and GPUs
  # until their time limit. With no slurmstepd left they are gone: fail them as Slurm does for a dead node
  # (NODE_FAIL; requeued if requeueable); the loop below resumes the node.
  if ((fresh)) && [[ -n $(squeue -h -t RUNNING,COMPLETING -w "$NODE" -o %i 2>/dev/null) ]]; then
    log "jobs listed as running on $NODE lost their processes: marking them NODE_FAIL"
    scontrol update nodename="$NODE" state=down reason="slurm-cluster.sh: slurmd restarted without its jobs"
  fi
  # A DRAIN or DOWN left in the state dir by an earlier run must not block: resume the node once slurmd
  # has registered. INVAL means slurm.conf and what slurmd found disagree: no waiting will fix that.
  local deadline=$((SECONDS + TIMEOUT_S)) state
  until node_usable; do
    state=$(node_state)
    if [[ $state == *INVAL* ]]; then fail "node $NODE is $state: slurmd rejected its configuration"; fi
    if [[ $state =~ DRAIN|DOWN|FAIL ]] && [[ $state != *NOT_RESPONDING* ]]; then
      log "node $NODE was $state: resuming it"
      scontrol update nodename="$NODE" state=resume 2>/dev/null || true
    fi
    ((SECONDS < deadline)) || fail "node $NODE is '$state', not idle, after ${TIMEOUT_S}s"
    sleep 0.2
  done
}

# A trivial job end to end: the scheduler runs it and accounting records it.
smoke_test() {
  local job_id deadline=$((SECONDS + TIMEOUT_S))
  job_id=$(timeout "$TIMEOUT_S" srun -p "$(smoke_partition)" -N1 -n1 -t1 --quiet -J slurm-cluster-check \
    printenv SLURM_JOB_ID) || fail "srun -N1 printenv SLURM_JOB_ID did not run within ${TIMEOUT_S}s"
  ((ACCOUNTING)) || return 0
  until [[ $(sacct -n -X -P -j "$job_id" -o State 2>/dev/null) == COMPLETED ]]; do
    ((SECONDS < deadline)) || fail "sacct does not report job $job_id as COMPLETED after ${TIMEOUT_S}s"
    sleep 0.2
  done
}

cmd_up() {
  local started=$SECONDS
  parse_flags "$@"
  install_packages
  write_configs
  if [[ $SLURM_CONF_CHANGE == none ]] && ((DBD_CONF_CHANGED == 0)) && cluster_usable; then
    log "cluster $CLUSTER already up (node $NODE, $ETC/slurm.conf)"
    return 0
  fi
  start_munge
  if ((ACCOUNTING)); then
    start_mariadb
    start_slurmdbd
    apply_qos_limit
    apply_site
  else
    stop_daemons slurmdbd # as on a cluster without accounting: sacct fails
  fi
  start_slurmctld
  start_slurmd
  smoke_test
  log "cluster $CLUSTER up in $((SECONDS - started))s: node $NODE, $N_CPUS CPUs, variant: $VARIANT," \
    "MaxArraySize=$MAX_ARRAY_SIZE, config $ETC/slurm.conf"
}

cmd_down() {
  # Jobs end first: with proctrack/linuxproc nothing would clean up after a job whose slurmstepd is killed.
  if ctld_ok && [[ -n $(squeue -h -o %i 2>/dev/null) ]]; then
    log "cancelling every job"
    squeue -h -o %i | xargs -r scancel 2>/dev/null || true
    local deadline=$((SECONDS + 15))
    while [[ -n $(squeue -h -o %i 2>/dev/null) ]] && ((SECONDS < deadline)); do sleep 0.2; done
  fi
  # In three rounds: slurmctld hands its last records to slurmdbd, which writes them to mariadb.
  stop_daemons slurmd slurmctld slurmstepd
  stop_daemons slurmdbd
  stop_daemons mariadbd munged
  log "cluster $CLUSTER down"
}

cluster_usable() {
  munge_ok && pid_alive slurmd && ctld_ok && node_usable &&
    { ! conf_has_accounting || sacct -n -X -S now >/dev/null 2>&1; }
}

cmd_status() {
  local name
  for name in munged mariadbd slurmdbd slurmctld slurmd; do
    if pid_alive "$name"; then
      printf '  %-10s running (pid %s)\n' "$name" "$(cat "$(pidfile_of "$name")")"
    else
      printf '  %-10s stopped\n' "$name"
    fi
  done
  if ctld_ok; then
    printf '  variant: %s\n' "$(sed -n 's/^# Variant: //p' "$ETC/slurm.conf")"
    sinfo -o '  %P %a %D %T %C %G %l' 2>&1 || true
    printf '  %s; config %s\n' "$(scontrol show config | grep -o 'MaxArraySize *= *[0-9]*')" "$ETC/slurm.conf"
  fi
  if cluster_usable; then
    log "cluster $CLUSTER usable"
  else
    log "cluster $CLUSTER not usable: run scripts/slurm-cluster.sh up (make slurm-up)"
    return 1
  fi
}

main() {
  local cmd=${1:-}
  case $cmd in
  up | down | status) ;;
  *) die "usage: $0 up [FLAGS]|down|status, but got '${cmd}'" ;;
  esac
  [[ $cmd == up ]] || (($# <= 1)) || die "only up takes flags, but got: $*"
  [[ $cmd == status ]] || ((EUID == 0)) || die "$0 $cmd must run as root (it installs packages and starts daemons)"
  shift
  "cmd_$cmd" "$@"
}

main "$@"
