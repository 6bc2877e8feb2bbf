#!/usr/bin/env python3
"""Decode an OTLP profiles request (ExportProfilesServiceRequest, protobuf) with PyPI's opentelemetry-proto and
print what tests compare, as JSON: each profile's sample type, unit, total value, time and duration, the resource
attributes, and the samples of each type as folded stacks (`comm;root;...;leaf`, inlined frames expanded).

Usage: decode.py FILE   (PYTHONPATH must reach opentelemetry-proto; tools/otlp/install.sh puts it in
/opt/rprof-tests/otlp-proto)"""
import json
import sys

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2

req = profiles_service_pb2.ExportProfilesServiceRequest()
with open(sys.argv[1], "rb") as f:
    req.ParseFromString(f.read())
d = req.dictionary
s = d.string_table
assert s[0] == "", "string_table[0] must be empty"
for table in (d.mapping_table, d.location_table, d.function_table, d.stack_table, d.attribute_table):
    assert len(table) > 0 and table[0].ByteSize() == 0, "entry 0 of each table must be its zero value"


def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None


out = {"profiles": [], "resource": {}, "scope": None}
for rp in req.resource_profiles:
    out["resource"] = {kv.key: value(kv.value) for kv in rp.resource.attributes}
    for sp in rp.scope_profiles:
        out["scope"] = sp.scope.name
        for p in sp.profiles:
            folded = {}
            total = 0
            for sample in p.samples:
                attrs = {}
                for a in sample.attribute_indices:
                    kv = d.attribute_table[a]
                    attrs[s[kv.key_strindex]] = value(kv.value)
                frames = []
                for loc in reversed(d.stack_table[sample.stack_index].location_indices):
                    lines = d.location_table[loc].lines
                    frames.extend(s[d.function_table[l.function_index].name_strindex] for l in reversed(lines))
                key = ";".join([str(attrs.get("comm", ""))] + frames)
                v = sum(sample.values)
                folded[key] = folded.get(key, 0) + v
                total += v
            out["profiles"].append({
                "type": s[p.sample_type.type_strindex],
                "unit": s[p.sample_type.unit_strindex],
                "total": total,
                "time_unix_nano": p.time_unix_nano,
                "duration_nano": p.duration_nano,
                "folded": folded,
            })
json.dump(out, sys.stdout)
