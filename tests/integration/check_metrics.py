#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Checks `rdmacm-muxctl metrics` (stdin) against Prometheus' text format
with the prometheus_client library's own parser, plus the naming rules
the parser leaves to us: a HELP and a TYPE line before every family's
samples, counters named *_total, the rdmacm_mux_ prefix.  Prints one
"metric NAME{labels} VALUE" line per sample for the caller to check
values; exit status 0 when everything holds."""
import re
import sys

from prometheus_client.parser import text_string_to_metric_families

text = sys.stdin.read()
errors = []
helped, typed = set(), {}
for line in text.splitlines():
    m = re.match(r"# (HELP|TYPE) (\S+) (.*)", line)
    if m and m.group(1) == "HELP":
        helped.add(m.group(2))
        continue
    if m:
        typed[m.group(2)] = m.group(3)
        continue
    if line.startswith("#") or not line:
        continue
    name = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0)
    if name not in helped or name not in typed:
        errors.append("sample before its HELP and TYPE: " + line)
for name, kind in typed.items():
    if not name.startswith("rdmacm_mux_"):
        errors.append("no rdmacm_mux_ prefix: " + name)
    if kind == "counter" and not name.endswith("_total"):
        errors.append("counter not named *_total: " + name)
    if kind not in ("counter", "gauge"):
        errors.append("unexpected type %s for %s" % (kind, name))
try:
    families = list(text_string_to_metric_families(text))
except Exception as e:  # the parser's verdict on the format
    errors.append("prometheus_client cannot parse it: %s" % e)
    families = []
for fam in families:
    for s in fam.samples:
        labels = ",".join('%s="%s"' % kv for kv in sorted(s.labels.items()))
        print("metric %s{%s} %g" % (s.name, labels, s.value))
for e in errors:
    print("check_metrics: " + e, file=sys.stderr)
sys.exit(1 if errors or not families else 0)
