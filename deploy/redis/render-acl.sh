#!/bin/sh
# Write users.acl with each user's password (from the environment) as a SHA-256 hash, for redis-server
# --aclfile. Usage: REDIS_ACL_WORKER_PASSWORD=… REDIS_ACL_SUBMITTER_PASSWORD=…
#   REDIS_ACL_MONITOR_PASSWORD=… REDIS_ACL_SCALER_PASSWORD=… deploy/redis/render-acl.sh [users.acl] \
#   > /etc/redis/users.acl
# A user whose password is unset is left without one: it cannot log in.
set -eu
template=${1:-$(dirname "$0")/users.acl}
hash() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
while IFS= read -r line; do
  name=$(printf '%s\n' "$line" | cut -d' ' -f2)
  case $name in
    worker) secret=${REDIS_ACL_WORKER_PASSWORD:-} ;;
    submitter) secret=${REDIS_ACL_SUBMITTER_PASSWORD:-} ;;
    monitor) secret=${REDIS_ACL_MONITOR_PASSWORD:-} ;;
    scaler) secret=${REDIS_ACL_SCALER_PASSWORD:-} ;;
    *) secret= ;;
  esac
  if [ -n "$secret" ]; then
    line=$(printf '%s\n' "$line" | sed "s/ resetpass / resetpass #$(hash "$secret") /")
  fi
  printf '%s\n' "$line"
done < "$template"
