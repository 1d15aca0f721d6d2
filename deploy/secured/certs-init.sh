#!/bin/sh
# The one-shot `certs` service of deploy/docker-compose.secured.yml (busybox, as root).
#
# Copies the TLS files generated on the host (mounted read-only at /src) into one named
# volume per consumer, each owned by the uid that reads it, keys mode 400: the containers
# run as different users (Kafka's appuser 1000, redis 999, mongodb 999, the workers 10001)
# and a bind mount of the host directory would keep the host's owner and modes. Each server
# gets only its own key; the workers only the CA certificate. Runs on every `up`, so
# regenerated certificates reach the volumes (restart kafka, redis and mongo to load them).
#
# It also creates MongoDB's replica-set keyfile the first time (kept afterwards): 756
# random characters of the base64 alphabet, mode 400, owned by mongodb.
set -eu
umask 077

for f in ca.pem server.crt server.key server.pem; do
  if [ ! -s "/src/$f" ]; then
    echo "certs: /src/$f is missing; generate the files first:" >&2
    echo "  python -m crawler.localstack.certs deploy/secured/certs --host kafka --host redis" \
         "--host mongo --host localhost --host 127.0.0.1" >&2
    exit 1
  fi
done

# put SOURCE VOLUME UID MODE: copy /src/SOURCE into /out/VOLUME, owned by UID, with MODE
put() {
  cat "/src/$1" > "/out/$2/$1"
  chown "$3:$3" "/out/$2/$1"
  chmod "$4" "/out/$2/$1"
}

# workers (uid 10001) and anyone else: the CA certificate only, world-readable
put ca.pem ca 0 444
chmod 755 /out/ca

# kafka (appuser, uid 1000): its certificate and key, read by start.sh
put ca.pem kafka 1000 444
put server.crt kafka 1000 400
put server.key kafka 1000 400
chown 1000:1000 /out/kafka && chmod 500 /out/kafka

# redis (uid 999)
put ca.pem redis 999 444
put server.crt redis 999 400
put server.key redis 999 400
chown 999:999 /out/redis && chmod 500 /out/redis

# mongodb (uid 999): certificate and key in one file (--tlsCertificateKeyFile), the keyfile
put ca.pem mongo 999 444
put server.pem mongo 999 400
if [ ! -s /out/mongo/keyfile ]; then
  tr -dc 'A-Za-z0-9' < /dev/urandom | head -c 756 > /out/mongo/keyfile
fi
chown 999:999 /out/mongo/keyfile && chmod 400 /out/mongo/keyfile
chown 999:999 /out/mongo && chmod 500 /out/mongo

echo "certs: TLS files installed into the tls-* volumes"
