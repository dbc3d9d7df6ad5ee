#!/usr/bin/env bash
# Runs inside the robot image (docker/check.sh: buildah run): the sim graph for a few seconds
# with its summary, the graph health check while it runs, then a policy server answering the
# robot's handshake and one query. DDS stays on this machine on a domain of its own.
set -euo pipefail
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
export ROS_DOMAIN_ID=${ROS_DOMAIN_ID:-201}
DURATION=${SMOKE_DURATION:-8}
run_dir=$(mktemp -d /tmp/smoke-run.XXXXXX)

echo "== smoke: sim graph for ${DURATION} s (ROS_DOMAIN_ID=$ROS_DOMAIN_ID), health probe while it runs"
egomimic-launch eva_bimanual.launch.py --duration "$DURATION" --summary --quiet --run-dir "$run_dir" &
launcher=$!
probe=0
python /opt/egomimic/docker/probe_graph.py --timeout 120 --window 2 || probe=$?
launch=0
wait "$launcher" || launch=$?
echo "== smoke: launcher exit $launch, graph probe exit $probe"

port=$(python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "== smoke: egomimic-policy-server --policy fold on 127.0.0.1:$port, one query"
egomimic-policy-server --policy fold --bind "tcp://127.0.0.1:$port" &
server=$!
answered=0
python /opt/egomimic/docker/probe_policy_server.py --address "tcp://127.0.0.1:$port" --timeout 180 --infer \
  || answered=$?
kill -INT "$server" 2>/dev/null || true
wait "$server" || true
echo "== smoke: policy server probe exit $answered"
test "$launch" -eq 0 && test "$probe" -eq 0 && test "$answered" -eq 0
