#!/bin/sh
# Run every 30 s (systemd timer or cron): writes outbox gauges for node_exporter's
# textfile collector. Never exports payloads: `status --json` carries counts only.
set -eu
venv="${OUTBOX_VENV:-/opt/outbox/.venv}"
out="${TEXTFILE_DIR:-/var/lib/node_exporter/textfile}/outbox.prom"
"$venv/bin/outbox" status --json | "$venv/bin/python" -c '
import json, sys
s = json.load(sys.stdin)
outbox = s["outbox"]
print("# TYPE outbox_messages gauge")
for state in ("pending", "published", "failed"):
    print("outbox_messages{state=\"%s\"} %s" % (state, outbox[state]))
print("# TYPE outbox_oldest_pending_age_seconds gauge")
print("outbox_oldest_pending_age_seconds %s" % (outbox["oldest_pending_age_s"] or 0))
print("# TYPE outbox_jobs gauge")
for queue, counts in s["queues"].items():
    for state in ("ready", "delayed", "reserved", "dead"):
        print("outbox_jobs{queue=\"%s\",state=\"%s\"} %s" % (queue, state, counts.get(state, 0)))
' >"$out.tmp"
mv "$out.tmp" "$out"
