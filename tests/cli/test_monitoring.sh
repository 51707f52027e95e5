#!/usr/bin/env bash
# Watching a run as users do, checked with readers no one on this project wrote: a tiny run's
# TensorBoard event file is decoded record by record by Debian's `protoc --decode_raw`, and read by
# Python's google.protobuf with a descriptor built from TensorBoard's field numbers, whose scalars
# equal metrics.jsonl's at every step (as float32: simple_value is a float); a resume from an
# earlier checkpoint adds a file whose SessionLog START drops the abandoned steps; a flipped byte
# fails the records' CRC-32C; --tensorboard off writes none; `boostlm plot` draws the runs.
# Usage: test_monitoring.sh path/to/boostlm
set -uo pipefail
boostlm=$1
source "$(dirname "$0")/lib.sh" monitoring
# Debian's python3, which has python3-protobuf (a python3 earlier on PATH may lack it).
python=/usr/bin/python3
if ! command -v protoc > /dev/null || ! $python -c "import google.protobuf" 2> /dev/null; then
  echo "skipped: protoc or Python's google.protobuf missing (scripts/setup.sh installs them)"
  exit 77
fi

tiny_corpus "$boostlm" "$work"
settings=(-c "$work/cola.json" -d "$work/data" -b 2 -t 16 --lr 3e-3 --warmup 2 --eval-interval 3
          --eval-batches 1 --save-interval 3 --log-interval 100)
"$boostlm" train "${settings[@]}" -o "$work/run" --steps 6 > "$work/first.out" 2>&1 ||
  fail "training: $(cat "$work/first.out")"
# The resume reruns steps 4..6 from step 3's checkpoint: a second event file.
"$boostlm" train "${settings[@]}" -o "$work/run" --resume "$work/run/checkpoints/step_000003" \
  --steps 6 > "$work/resumed.out" 2>&1 || fail "resume: $(cat "$work/resumed.out")"
grep -q "mem [0-9]* MB" "$work/first.out" || fail "no peak memory in the progress line"
grep -q '"checkpoints_written":2' "$work/first.out" || fail "summary: $(tail -1 "$work/first.out")"

$python - "$work/run" << 'PY' || fail "event files do not match metrics.jsonl"
import glob, json, os, struct, subprocess, sys
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

run = sys.argv[1]
F = descriptor_pb2.FieldDescriptorProto

# CRC-32C written here from its definition (reflected polynomial 0x82f63b78), checked against
# RFC 3720's vector, and TFRecord's mask of it.
def crc32c(data):
    crc = 0xffffffff
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82f63b78 if crc & 1 else 0)
    return crc ^ 0xffffffff
assert crc32c(bytes(32)) == 0x8a9136aa
def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xa282ead8) & 0xffffffff

def records(blob):
    at, out = 0, []
    while at < len(blob):
        length, length_crc = struct.unpack_from("<QI", blob, at)
        if masked(blob[at:at + 8]) != length_crc:
            raise ValueError(f"length CRC at byte {at}")
        data = blob[at + 12:at + 12 + length]
        if len(data) != length or masked(data) != struct.unpack_from("<I", blob, at + 12 + length)[0]:
            raise ValueError(f"data CRC at byte {at}")
        out.append(data)
        at += 16 + length
    return out

# TensorBoard's event.proto and summary.proto, the fields a scalar uses, by number.
proto = descriptor_pb2.FileDescriptorProto(name="tb_subset.proto", package="tb", syntax="proto3")
def message(name, fields):
    m = proto.message_type.add(name=name)
    for field_name, number, kind, extra in fields:
        field = m.field.add(name=field_name, number=number, type=kind,
                            label=extra.get("label", F.LABEL_OPTIONAL))
        if "type_name" in extra:
            field.type_name = extra["type_name"]
message("Value", [("tag", 1, F.TYPE_STRING, {}), ("simple_value", 2, F.TYPE_FLOAT, {})])
message("Summary", [("value", 1, F.TYPE_MESSAGE,
                     {"label": F.LABEL_REPEATED, "type_name": ".tb.Value"})])
message("SessionLog", [("status", 1, F.TYPE_INT32, {})])  # an enum: START is 1
message("Event", [("wall_time", 1, F.TYPE_DOUBLE, {}), ("step", 2, F.TYPE_INT64, {}),
                  ("file_version", 3, F.TYPE_STRING, {}),
                  ("summary", 5, F.TYPE_MESSAGE, {"type_name": ".tb.Summary"}),
                  ("session_log", 7, F.TYPE_MESSAGE, {"type_name": ".tb.SessionLog"})])
pool = descriptor_pool.DescriptorPool()
pool.Add(proto)
descriptor = pool.FindMessageTypeByName("tb.Event")
try:
    Event = message_factory.GetMessageClass(descriptor)
except AttributeError:  # protobuf before 4.22
    Event = message_factory.MessageFactory(pool).GetPrototype(descriptor)

files = glob.glob(os.path.join(run, "events.out.tfevents.*"))
assert len(files) == 2, f"{len(files)} event files, not one per start: {files}"
host = os.uname().nodename
events_by_file = []
for path in files:
    name = os.path.basename(path)
    seconds, rest = name[len("events.out.tfevents."):].split(".", 1)
    assert len(seconds) == 10 and seconds.isdigit() and rest.startswith(host + "."), name
    events = []
    for data in records(open(path, "rb").read()):
        decoded = subprocess.run(["protoc", "--decode_raw"], input=data, capture_output=True)
        assert decoded.returncode == 0 and decoded.stdout, f"protoc --decode_raw: {decoded.stderr}"
        event = Event.FromString(data)
        # Every byte is a field of the descriptor: re-encoded, the event is the record again.
        assert event.SerializeToString() == data, "fields outside TensorBoard's numbers"
        events.append(event)
    assert events[0].file_version == "brain.Event:2", events[0]
    assert events[0].wall_time >= int(seconds), "the name's time is after the first event's"
    events_by_file.append(events)

# As TensorBoard reads a directory (its EventAccumulator): files in order of their start; the first
# SessionLog START is the run's, and each later one drops the points of its step and after that
# came before it.
events_by_file.sort(key=lambda events: events[0].wall_time)
starts = [(e[1].session_log.status, e[1].step) for e in events_by_file]
assert starts == [(1, 1), (1, 4)], f"the files do not begin with STARTs at steps 1 and 4: {starts}"
points, seen_start = {}, False
for events in events_by_file:
    for event in events:
        if event.session_log.status == 1:
            if seen_start:
                points = {step: p for step, p in points.items() if step < event.step}
            seen_start = True
        if event.HasField("summary"):
            points[event.step] = {v.tag: v.simple_value for v in event.summary.value}

f32 = lambda x: struct.unpack("f", struct.pack("f", x))[0]
lines = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl"))]
assert [m["step"] for m in lines] == sorted(points) == list(range(1, 7)), sorted(points)
direct = {"loss/train": "loss", "loss/val": "val_loss", "optimizer/lr": "lr",
          "optimizer/grad_norm": "grad_norm", "throughput/tokens_per_s": "tokens_per_s",
          "throughput/mfu": "mfu", "time/step_ms": "step_ms",
          "progress/tokens_seen": "tokens_seen", "memory/peak_rss_mb": "peak_rss_mb_max"}
for m in lines:
    expected = {tag: f32(m[key]) for tag, key in direct.items() if key in m}
    for group in ("tp", "dp", "pp"):
        expected[f"comm/{group}_bytes"] = f32(sum(c["bytes"] for c in m["comm"][group].values()))
    if "save" in m:
        expected["checkpoint/stall_ms"] = f32(m["save"]["stall_ms"])
    if m.get("save_committed"):
        expected["checkpoint/commit_ms"] = f32(m["save_committed"][-1]["total_ms"])
    assert points[m["step"]] == expected, (m["step"], points[m["step"]], expected)
assert "loss/val" in points[3] and "checkpoint/stall_ms" in points[3], points[3]
assert any("checkpoint/commit_ms" in p for p in points.values()), "no commit time"

# A flipped byte in any record is caught by the CRCs.
blob = bytearray(open(files[0], "rb").read())
for at in (3, 10, 40, len(blob) - 2):
    corrupt = bytearray(blob)
    corrupt[at] ^= 0x04
    try:
        records(bytes(corrupt))
    except ValueError:
        continue
    raise AssertionError(f"a flipped byte at {at} passed the CRCs")
print(f"{len(files)} event files, {sum(map(len, events_by_file))} records: match metrics.jsonl")
PY

"$boostlm" train "${settings[@]}" -o "$work/off" --steps 1 --tensorboard off > /dev/null 2>&1 ||
  fail "training with --tensorboard off"
ls "$work/off"/events.out.tfevents.* > /dev/null 2>&1 && fail "--tensorboard off wrote an event file"

# boostlm plot: one run and two overlaid, PNG and SVG.
"$boostlm" plot "$work/run" "$work/off" -o "$work/runs.svg" > /dev/null 2>&1 || fail "plot to svg"
grep -q "<svg" "$work/runs.svg" && grep -q "learning rate" "$work/runs.svg" &&
  grep -q "tokens/s" "$work/runs.svg" && grep -q "run validation" "$work/runs.svg" ||
  fail "the svg lacks a panel or a series"
"$boostlm" plot "$work/run/metrics.jsonl" -o "$work/run.png" > /dev/null 2>&1 || fail "plot to png"
[[ $(head -c 8 "$work/run.png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
  fail "run.png is not a PNG"
expect_error "plot to .jpg" "must end in .png or .svg" "$boostlm" plot "$work/run" -o "$work/x.jpg"
finish "monitoring: event files read by protoc and google.protobuf equal metrics.jsonl; plot draws"
