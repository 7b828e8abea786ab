# The README's recipe ("Sending a signed webhook"), openssl and curl, as written there
# (test/ecosystem-senders.test.ts). The environment: URL, WHSECRET and BODY. Sends the same signed
# request twice and prints each answer as "<body> <status>".
set -eu
TS=$(date +%s); ID=$(node -p 'crypto.randomUUID()')
SIG=$(printf '%s' "$TS.$ID.$BODY" | openssl dgst -sha256 -hmac "$WHSECRET" -binary \
  | openssl base64 -A | tr '+/' '-_' | tr -d '=')
for _ in 1 2; do
  curl -s -w ' %{http_code}\n' -X POST "$URL" -H 'Content-Type: application/json' -H "Webhook-Timestamp: $TS" \
    -H "Webhook-Event-Id: $ID" -H "Webhook-Signature: $SIG" --data "$BODY"
done
