"""Append one benchmark's JSON line (stdin, the last line that is JSON) to a
results file with where and when it ran: host kind, CPU model name, date,
the command, and the fields given as name=value arguments.
usage: CMD | python3 bench/record.py FILE COMMAND [name=value ...]"""
import json
import subprocess
import sys
import time

path, command = sys.argv[1], sys.argv[2]
row = None
for line in sys.stdin:
    line = line.strip()
    if line.startswith("{"):
        row = json.loads(line)
if row is None:
    sys.exit("record.py: no JSON line on stdin")
cpu = ""
with open("/proc/cpuinfo") as f:
    for line in f:
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
kind = subprocess.run(["sh", __file__.rsplit("/", 1)[0] + "/host_kind.sh"], capture_output=True,
                      text=True).stdout.strip()
meta = {"host_kind": kind, "cpu_model_name": cpu, "date": time.strftime("%Y-%m-%dT%H:%M", time.gmtime()),
        "command": command}
for kv in sys.argv[3:]:
    k, v = kv.split("=", 1)
    meta[k] = json.loads(v) if v[:1] in "0123456789-[{" or v in ("true", "false") else v
row = dict(meta, **row)
with open(path, "a") as f:
    f.write(json.dumps(row) + "\n")
print(json.dumps(row))
