#!/bin/sh
# The command of the redis service of deploy/docker-compose.secured.yml (redis:7 image; it
# starts as root and the image's entrypoint drops to the redis user, uid 999).
#
# Writes the ACL file, then starts redis-server on TLS only (--port 0): users `default`
# (disabled, no password, no command) and `crawler` (every command and key) whose password
# is $REDIS_PASSWORD. The file holds the password's SHA-256 only (`#<hex>`), and the
# password is on no command line.
set -eu
: "${REDIS_PASSWORD:?REDIS_PASSWORD is not set}"

ACL=/tmp/users.acl
umask 077
hash=$(printf '%s' "$REDIS_PASSWORD" | sha256sum | cut -d' ' -f1)
{
  echo "user default off resetpass resetkeys resetchannels -@all"
  echo "user crawler on #$hash ~* &* +@all"
} > "$ACL"
chown redis:redis "$ACL"

# AOF persistence, fsync once a second, as in deploy/docker-compose.yml. TLS clients need
# not present a certificate (optional); the ones that do must have one signed by the CA.
exec /usr/local/bin/docker-entrypoint.sh redis-server \
  --aclfile "$ACL" \
  --port 0 --tls-port 6379 \
  --tls-cert-file /tls/server.crt --tls-key-file /tls/server.key \
  --tls-ca-cert-file /tls/ca.pem --tls-auth-clients optional \
  --appendonly yes --appendfsync everysec --save ""
