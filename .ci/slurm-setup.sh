#!/usr/bin/env bash
# A one-node Slurm cluster on localhost for the Slurm tests; idempotent.
#
# - installs nothing: CI runs `apt-get install -y slurm-wlm munge` first;
# - makes a munge key when there is none, starts munged when `munge -n | unmunge` fails;
# - writes /etc/slurm/slurm.conf (one node, "localhost" at 127.0.0.1, one partition)
#   unless CASEKIT_SLURM_CONF_KEEP=1, and starts slurmctld and slurmd on it
#   (logs: /var/log/slurm/), then waits for the node to be idle.
#
# Daemons listen on 127.0.0.1 only (SlurmctldHost, NodeAddr), run as root, and
# track processes without cgroups (proctrack/linuxproc), so a container will do.
# A cluster already up (`scontrol ping` answers and the node is idle) is left alone.
set -euo pipefail
CONF=/etc/slurm/slurm.conf
NODE=localhost
CPUS="$(nproc)"
MEMORY_MB="$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"

for tool in munged slurmctld slurmd scontrol sinfo; do
    command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y slurm-wlm munge" >&2; exit 1; }
done

# Outputs are read whole, then matched: a pipeline into an early-exit reader fails under pipefail when the reader exits first (SIGPIPE).
node_idle() { local state; state="$(sinfo -h -n "$NODE" -o '%T' 2>/dev/null)" || return 1; [[ $state =~ ^(idle|mixed|allocated|completing) ]]; }
controller_up() { local said; said="$(scontrol ping 2>/dev/null)" || return 1; [[ $said == *"is UP"* ]]; }
first_partition() { local all; all="$(sinfo -h -o '%P %D %T')"; echo "${all%%$'\n'*}"; }

if controller_up && node_idle; then
    echo "slurm ready: $(first_partition) (already up)"
    exit 0
fi

# munge: the key slurm authenticates with; root runs it here, as slurm does
mkdir -p /etc/munge /var/log/munge /var/lib/munge /run/munge
if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chmod 0700 /etc/munge /var/log/munge /var/lib/munge
chmod 0755 /run/munge
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    owner="$(stat -c %U /etc/munge/munge.key)"
    if [[ "$owner" != root ]]; then chown -R root:root /etc/munge /var/log/munge /var/lib/munge /run/munge; fi
    munged --force
    for _ in $(seq 1 20); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.5; done
    munge -n | unmunge >/dev/null || { echo "munged did not come up; see /var/log/munge/munged.log" >&2; exit 1; }
fi

mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
if [[ "${CASEKIT_SLURM_CONF_KEEP:-}" != 1 ]]; then
    cat >"$CONF" <<EOF
# written by casekit's .ci/slurm-setup.sh: one node on localhost, for tests
ClusterName=casekit
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
KillWait=5
# bind to the node's own address (127.0.0.1), never to every interface
CommunicationParameters=NoInAddrAny,NoCtldInAddrAny
MinJobAge=300
MaxArraySize=10001
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$CPUS RealMemory=$MEMORY_MB State=UNKNOWN
PartitionName=casekit Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
fi

if ! controller_up; then
    slurmctld
    for _ in $(seq 1 30); do controller_up && break; sleep 0.5; done
fi
if ! pgrep -x slurmd >/dev/null; then
    slurmd -N "$NODE"
fi
for _ in $(seq 1 60); do
    node_idle && break
    state="$(sinfo -h -n "$NODE" -o '%T' 2>/dev/null || true)"
    if [[ "$state" == down* || "$state" == drain* ]]; then scontrol update nodename="$NODE" state=resume || true; fi
    sleep 0.5
done
if ! node_idle; then
    echo "the slurm node did not come up: $(sinfo -h -N -o '%N %T %E' 2>&1)" >&2
    tail -20 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
    exit 1
fi
echo "slurm ready: $(first_partition)"
