"""An HMAC webhook sender on Python's standard library only (test/ecosystem-senders.test.ts).

The environment: URL, WHSECRET and BODY. Sends the same signed request twice and prints each
answer as "<body> <status>".
"""
import base64
import hashlib
import hmac
import os
import time
import urllib.error
import urllib.request
import uuid

body = os.environ["BODY"].encode("utf-8")
timestamp, event_id = str(int(time.time())), str(uuid.uuid4())
mac = hmac.new(os.environ["WHSECRET"].encode(), f"{timestamp}.{event_id}.".encode() + body, hashlib.sha256).digest()
signature = base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
for _ in range(2):
    request = urllib.request.Request(os.environ["URL"], data=body, method="POST", headers={
        "Content-Type": "application/json",
        "Webhook-Timestamp": timestamp,
        "Webhook-Event-Id": event_id,
        "Webhook-Signature": signature,
    })
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            print(response.read().decode(), response.status)
    except urllib.error.HTTPError as refused:
        print(refused.read().decode(), refused.code)
