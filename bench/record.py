"""Append one benchmark's JSON line (stdin, the last line that is JSON; with
RECORD_ALL=1 every JSON line) to a results file with where and when it ran:
host kind, CPU model name, date, the command, and the fields given as
name=value arguments.
usage: CMD | python3 bench/record.py FILE COMMAND [name=value ...]"""
import os
import json
import subprocess
import sys
import time

path, command = sys.argv[1], sys.argv[2]
rows = [json.loads(l) for l in (x.strip() for x in sys.stdin) if l.startswith("{")]
if not rows:
    sys.exit("record.py: no JSON line on stdin")
if os.environ.get("RECORD_ALL") != "1":
    rows = rows[-1:]
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
    try:  # numbers, lists, objects, booleans as JSON; anything else (a commit such as 49747ab) as text
        meta[k] = json.loads(v) if v[:1] in "0123456789-[{" or v in ("true", "false") else v
    except ValueError:
        meta[k] = v
with open(path, "a") as f:
    for row in rows:
        f.write(json.dumps(dict(meta, **row)) + "\n")
        print(json.dumps(dict(meta, **row)))
