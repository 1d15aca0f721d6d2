#!/bin/bash
# The command of the kafka service of deploy/docker-compose.secured.yml (apache/kafka image,
# as its appuser, uid 1000). Instead of the image's /etc/kafka/docker/run:
#
#   1. writes the broker's configuration: server.properties beside this script, plus the
#      server certificate and key from /tls (the tls-kafka volume) as inline PEM values;
#   2. formats the storage the first time, with the SCRAM-SHA-512 user `crawler` whose
#      password is $SCRAM_PASSWORD. In KRaft a SCRAM user can be created at format time
#      (kafka-storage format --add-scram) or later through a running broker; the image's
#      own start-up formats the storage itself, without --add-scram, on every start, so it
#      cannot be used as it is;
#   3. writes the client configuration of the health check (SASL_SSL as `crawler`);
#   4. starts the broker.
#
# The password is in the command line of `kafka-storage format` (visible to `ps` on the host)
# for the few seconds of that first format only: the tool has no other way to take it.
set -euo pipefail

: "${CLUSTER_ID:?CLUSTER_ID is not set}"
: "${SCRAM_PASSWORD:?SCRAM_PASSWORD is not set}"

HERE=/secured/kafka
TLS=/tls
DATA=/var/lib/kafka/data
CONF=/opt/kafka/config/secured   # inside the container only; appuser owns /opt/kafka
umask 077
mkdir -p "$CONF"

# pem_property NAME FILE: NAME=the PEM of FILE on one line, its line breaks written as \n
# (java.util.Properties reads \n in a value as a line break).
pem_property() {
  printf '%s=' "$1"
  awk '{ printf "%s\\n", $0 }' "$2"
  printf '\n'
}

{
  cat "$HERE/server.properties"
  echo
  echo "# appended by start.sh from $TLS"
  pem_property ssl.keystore.certificate.chain "$TLS/server.crt"
  pem_property ssl.keystore.key "$TLS/server.key"
} > "$CONF/server.properties"

if [ ! -f "$DATA/meta.properties" ]; then
  echo "===> Formatting $DATA with the SCRAM-SHA-512 user crawler"
  /opt/kafka/bin/kafka-storage.sh format --ignore-formatted \
    --cluster-id "$CLUSTER_ID" --config "$CONF/server.properties" \
    --add-scram "SCRAM-SHA-512=[name=crawler,password=$SCRAM_PASSWORD]"
fi

# The health check's client: TLS (trusting the CA) and SCRAM as crawler. The password is
# url-safe (README.md), so it needs no escaping inside the JAAS string.
cat > "$CONF/client.properties" <<PROPS
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="crawler" password="$SCRAM_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS/ca.pem
PROPS

exec /opt/kafka/bin/kafka-server-start.sh "$CONF/server.properties"
