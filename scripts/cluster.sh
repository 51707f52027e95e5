#!/usr/bin/env bash
# An emulated cluster on this one machine, made of real kernel networking, for running and
# benchmarking boostlm across "hosts" whose link is slow.
#
#   scripts/cluster.sh up N [--rate RATE] [--name NAME] [--slots K] [--hostfile FILE]
#   scripts/cluster.sh down [--name NAME]
#   scripts/cluster.sh status [--name NAME]
#
# `up` makes N hosts NAME-h0 .. NAME-h<N-1>, each a Linux network namespace with loopback and one
# veth link (eth0 inside, NAME-v<i> outside) to a bridge NAME-br in the root namespace. Addresses
# come from one free /24 of 198.18.0.0/15 (RFC 2544's range for benchmarking networks): the bridge
# is .1 (mpirun's daemon, in the root namespace, talks to the hosts through it), host i is .(i+2).
# No host has a default route and nothing forwards or NATs, so traffic cannot leave the
# namespaces and the bridge. With --rate (a tc rate: 500mbit, 1gbit, 25gbit), each link is shaped
# with a token bucket (tbf) in both directions: on NAME-v<i> (root side) tbf shapes what flows
# towards host i, on eth0 inside the namespace what flows from it. Host-to-host traffic crosses
# one of each, so it runs at RATE. Without --rate the links are not shaped. With --slots K > 1,
# the ranks of one host reach each other inside its namespace, not through the shaped link.
#
# It writes an Open MPI hostfile (default /run/boostlm-cluster/NAME.hostfile) whose first line
# marks it as emulated, for `boostlm launch --hostfile`:
#   # boostlm-emulated-cluster name=NAME rate=RATE subnet=198.18.X.0/24 namespaces=NAME-h0,...
# `down` removes exactly what `up` recorded in /run/boostlm-cluster/NAME.state, nothing else.
# `up` on an existing cluster of the same shape does nothing; of another shape it refuses.
# NAME starts with "blm" (every object carries the project prefix) and has at most 9 characters,
# so that interface names fit Linux's 15. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN).
#
# What this cannot represent: latency (netem is not available, so a link adds only the kernel's
# few microseconds, not a real switch's), and separate hardware: all hosts share this machine's
# cores and memory bandwidth, so one host's compute slows another's.
set -Eeuo pipefail

state_dir=/run/boostlm-cluster
usage() { sed -n '5,8p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "cluster.sh: $*" >&2; exit 1; }

command=${1:-}
[ -n "$command" ] || { usage >&2; exit 2; }
shift
hosts=0
case $command in
  up)
    [[ ${1:-} =~ ^[0-9]+$ ]] || die "up needs the number of hosts, e.g. cluster.sh up 2"
    hosts=$1; shift
    ((hosts >= 1 && hosts <= 250)) || die "hosts: $hosts is outside 1..250 (one /24 each)"
    ;;
  down | status) ;;
  -h | --help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
name=blm rate="" slots=1 hostfile=""
while (($#)); do
  case $1 in
    --rate) rate=${2:?--rate needs a value such as 1gbit}; shift ;;
    --name) name=${2:?--name needs a value}; shift ;;
    --slots) slots=${2:?--slots needs a number}; shift ;;
    --hostfile) hostfile=${2:?--hostfile needs a path}; shift ;;
    *) die "unknown option $1" ;;
  esac
  shift
done
[[ $name =~ ^blm[a-z0-9]{0,6}$ ]] ||
  die "--name $name: must be 'blm' followed by up to 6 lowercase letters or digits"
[[ $slots =~ ^[1-9][0-9]*$ ]] || die "--slots $slots: must be a positive number"
state=$state_dir/$name.state
hostfile=${hostfile:-$state_dir/$name.hostfile}

# Root, or at least the capabilities namespaces and links need: try the cheapest real operation.
require_admin() {
  local probe=${name}-probe$$
  if ! ip netns add "$probe" 2> /dev/null; then
    die "$command needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN to create network namespaces); run it with sudo"
  fi
  ip netns del "$probe"
}

# Bytes per second of a tc rate ("1gbit", "500mbit", "2.5gbit", "100kbit", "1000000bit").
rate_bytes_per_s() {
  python3 - "$1" << 'PY'
import re, sys
m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([kmgt]?)bit", sys.argv[1].lower())
if not m:
    sys.exit(f"cluster.sh: --rate {sys.argv[1]}: give bits per second as tc writes them, e.g. 1gbit or 500mbit")
scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
print(int(float(m.group(1)) * scale / 8))
PY
}

# tbf's bucket: at least 1 ms of traffic at RATE, and never under 128 KiB. Veth hands tbf
# GSO packets of up to 64 KiB; a bucket smaller than one would make tbf split each of them
# (costly) or drop it. 1 ms of line-rate burst is far below a training step's exchanges
# (tens of ms), so the rate averaged over any exchange is RATE. The queue (latency 50 ms)
# holds a TCP window's worth at the rates we use: drops would add retransmission stalls that a
# real lossless fabric (InfiniBand, NVLink) does not have.
tbf_args() {
  local bytes_per_s burst
  bytes_per_s=$(rate_bytes_per_s "$rate")
  burst=$((bytes_per_s / 1000 > 131072 ? bytes_per_s / 1000 : 131072))
  echo "rate $rate burst $burst latency 50ms"
}

# The first 198.18.X.0/24 or 198.19.X.0/24 no route of the root namespace uses.
free_subnet() {
  local used a b
  used=$(ip -4 route show)
  for a in 18 19; do
    for b in $(seq 0 255); do
      if ! grep -q "^198\.$a\.$b\." <<< "$used"; then echo "198.$a.$b"; return; fi
    done
  done
  die "no free /24 left in 198.18.0.0/15"
}

# Records one object made, so that `down` removes it (and only it) even after a failed `up`.
record() { echo "$*" >> "$state"; }

read_state() {  # sets: s_hosts s_rate s_slots s_subnet s_hostfile
  s_hosts=$(sed -n 's/^hosts //p' "$state")
  s_rate=$(sed -n 's/^rate //p' "$state")
  s_slots=$(sed -n 's/^slots //p' "$state")
  s_subnet=$(sed -n 's/^subnet //p' "$state")
  s_hostfile=$(sed -n 's/^hostfile //p' "$state")
}

cluster_up() {
  if [ -f "$state" ]; then
    read_state
    if [ "$s_hosts" = "$hosts" ] && [ "$s_rate" = "${rate:-none}" ] && [ "$s_slots" = "$slots" ] &&
      [ -f "$s_hostfile" ]; then
      echo "cluster $name is already up ($hosts hosts, rate ${rate:-none}): $s_hostfile"
      print_usage "$s_hostfile"
      return
    fi
    die "cluster $name is up with $s_hosts hosts, rate $s_rate, $s_slots slots; run 'cluster.sh down --name $name' first"
  fi
  local tbf=""
  [ -z "$rate" ] || tbf=$(tbf_args)
  mkdir -p "$state_dir"
  local net
  net=$(free_subnet)
  printf 'hosts %s\nrate %s\nslots %s\nsubnet %s.0/24\nhostfile %s\n' "$hosts" "${rate:-none}" \
    "$slots" "$net" "$hostfile" > "$state"
  # Any failure from here on leaves the state file listing what exists: undo it.
  trap 'echo "cluster.sh: up failed; removing what it made" >&2; cluster_down > /dev/null' ERR

  local bridge=${name}-br
  ip link add "$bridge" type bridge
  record link "$bridge"
  ip addr add "$net.1/24" dev "$bridge"
  ip link set "$bridge" up
  local i ns veth names=()
  for ((i = 0; i < hosts; i++)); do
    ns=${name}-h$i veth=${name}-v$i
    ip netns add "$ns"
    record netns "$ns"
    ip link add "$veth" type veth peer name eth0 netns "$ns"
    record link "$veth"
    ip link set "$veth" master "$bridge" up
    ip -n "$ns" link set lo up
    # A collective follows a gap of compute; Linux would restart TCP's slow start after it (per
    # namespace setting), which the lossless fabrics emulated here do not do.
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
    ip -n "$ns" addr add "$net.$((i + 2))/24" dev eth0
    ip -n "$ns" link set eth0 up
    if [ -n "$tbf" ]; then
      # shellcheck disable=SC2086  # tbf's words
      tc qdisc add dev "$veth" root tbf $tbf
      # shellcheck disable=SC2086
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf $tbf
    fi
    names+=("$ns")
  done
  mkdir -p "$(dirname "$hostfile")"
  {
    echo "# boostlm-emulated-cluster name=$name rate=${rate:-none} subnet=$net.0/24" \
      "namespaces=$(IFS=,; echo "${names[*]}")"
    for ns in "${names[@]}"; do echo "$ns slots=$slots"; done
  } > "$hostfile"
  record file "$hostfile"
  trap - ERR
  echo "cluster $name up: $hosts hosts on $net.0/24, links ${rate:-not shaped}${tbf:+ (tbf $tbf)}"
  print_usage "$hostfile"
}

print_usage() {
  cat << EOF
hostfile: $1
run a command on it:  boostlm launch -n $((hosts * slots)) --hostfile $1 -- train ...
remove it:            scripts/cluster.sh down${name:+ --name $name}
EOF
}

# Removes what the state file lists, newest first (the namespaces take their eth0 and its qdisc
# with them; deleting a veth end deletes its peer and its qdisc; the bridge goes last).
cluster_down() {
  [ -f "$state" ] || { echo "cluster $name is not up (no $state)"; return; }
  local kind what
  tac "$state" | while read -r kind what; do
    case $kind in
      netns)
        # A host's processes (an orted a killed job left behind) would keep it alive unnamed.
        ip netns pids "$what" 2> /dev/null | xargs -r kill -KILL 2> /dev/null || true
        ip netns del "$what" 2> /dev/null || true
        # The host's own /tmp, which `boostlm netns-agent` makes on the first run there.
        rm -rf "/tmp/boostlm-netns-$what" ;;
      link) ip link del "$what" 2> /dev/null || true ;;
      file) rm -f "$what" ;;
    esac
  done
  rm -f "$state"
  echo "cluster $name down"
}

cluster_status() {
  [ -f "$state" ] || { echo "cluster $name is not up"; return 1; }
  read_state
  echo "cluster $name: $s_hosts hosts, $s_slots slots each, rate $s_rate, subnet $s_subnet"
  echo "hostfile: $s_hostfile"
  local kind what
  while read -r kind what; do
    case $kind in
      netns)
        echo "  $what: $(ip -n "$what" -4 -br addr show dev eth0 2> /dev/null | awk '{print $3}')" \
          "$(ip netns exec "$what" tc qdisc show dev eth0 2> /dev/null | grep -o 'tbf.*' || true)" ;;
    esac
  done < "$state"
}

case $command in
  up)
    require_admin
    mkdir -p "$state_dir"
    exec 9> "$state_dir/lock"  # one `up` or `down` at a time: subnets are chosen by looking
    flock 9
    cluster_up ;;
  down)
    require_admin
    mkdir -p "$state_dir"
    exec 9> "$state_dir/lock"
    flock 9
    cluster_down ;;
  status) cluster_status ;;
esac
