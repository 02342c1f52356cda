#!/bin/sh
# Run every 30 s (systemd timer or cron): writes outbox gauges for node_exporter's
# textfile collector. Never exports payloads: `status --json` carries counts only.
set -eu
out="${TEXTFILE_DIR:-/var/lib/node_exporter/textfile}/outbox.prom"
/opt/outbox/.venv/bin/outbox status --json | /opt/outbox/.venv/bin/python -c '
import json, sys
s = json.load(sys.stdin)
print("# TYPE outbox_messages gauge")
for state in ("pending", "published", "failed"):
    print(f"outbox_messages{{state=\"{state}\"}} {s[\"outbox\"][state]}")
print("# TYPE outbox_oldest_pending_age_seconds gauge")
print(f"outbox_oldest_pending_age_seconds {s[\"outbox\"][\"oldest_pending_age_s\"] or 0}")
print("# TYPE outbox_jobs gauge")
for queue, counts in s["queues"].items():
    for state in ("ready", "delayed", "reserved", "dead"):  # "dead_letters" is the same as "dead"
        print(f"outbox_jobs{{queue=\"{queue}\",state=\"{state}\"}} {counts.get(state, 0)}")
' >"$out.tmp"
mv "$out.tmp" "$out"
