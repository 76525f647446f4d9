#!/usr/bin/env bash
# Device ceiling for the navis benchmarks (issue 7): random 4 KiB O_DIRECT reads at queue depth 1
# and 64, measured by fio on the file system that holds benchmarks/data (where the benchmark
# clusters and the navis side files live when they run there; /tmp is the same file system here).
#
#   benchmarks/device/fio_ceiling.sh            (as root; about 1 min plus laying out the test file)
#
# Installs fio if missing (apt-get), lays out a test file of 4 GiB (2 GiB when less than 16 GiB
# are free; refuses below 4 GiB free), runs one 20 s job per queue depth, deletes the file, and
# writes benchmarks/results/device.json (fio's numbers per queue depth, the machine, the date, the
# commands) and benchmarks/results/device.md (the table).
#
# Environment: RUNTIME (seconds per job, 20), QDS ("1 64"), SIZE (e.g. 4G; overrides the choice
# from df), ENGINE (io_uring, else libaio), DIR (where the test file goes: benchmarks/data),
# OUT (benchmarks/results), NICE (15: the jobs run under nice -n $NICE; empty to turn off).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DIR=${DIR:-$ROOT/benchmarks/data}
OUT=${OUT:-$ROOT/benchmarks/results}
RUNTIME=${RUNTIME:-20}
QDS=${QDS:-1 64}
NICE=${NICE-15}
mkdir -p "$DIR" "$OUT"

if ! command -v fio >/dev/null; then
    echo "installing fio" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q fio >/dev/null
fi
ENGINE=${ENGINE:-}
if [ -z "$ENGINE" ]; then
    if fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*io_uring'; then ENGINE=io_uring; else ENGINE=libaio; fi
fi

avail_kib=$(df -Pk "$DIR" | awk 'NR == 2 {print $4}')
if [ -z "${SIZE:-}" ]; then
    if [ "$avail_kib" -ge $((16 * 1024 * 1024)) ]; then SIZE=4G
    elif [ "$avail_kib" -ge $((4 * 1024 * 1024)) ]; then SIZE=2G
    else echo "only $((avail_kib / 1024)) MiB free under $DIR; need 4 GiB" >&2; exit 1
    fi
fi
FILE=$DIR/fio-ceiling.$$.dat
TMPD=$(mktemp -d)
trap 'rm -f "$FILE"; rm -rf "$TMPD"' EXIT
nice_cmd=()
[ -n "$NICE" ] && nice_cmd=(nice -n "$NICE")

# lay the file out once (fio writes it fully, so reads hit allocated blocks, not holes)
echo "laying out $SIZE test file $FILE" >&2
"${nice_cmd[@]}" fio --name=layout --filename="$FILE" --size="$SIZE" --rw=write --bs=1M \
    --direct=1 --ioengine="$ENGINE" --iodepth=8 --end_fsync=1 --output-format=json \
    >"$TMPD/layout.json"

cmds=()
for qd in $QDS; do
    cmd=(fio --name="randread-qd$qd" --filename="$FILE" --size="$SIZE" --rw=randread --bs=4k
         --direct=1 --ioengine="$ENGINE" --iodepth="$qd" --numjobs=1 --time_based
         --runtime="$RUNTIME" --ramp_time=2 --norandommap --randrepeat=0 --lat_percentiles=1
         --output-format=json)
    cmds+=("${cmd[*]}")
    echo "fio randread 4k QD $qd, ${RUNTIME}s" >&2
    "${nice_cmd[@]}" "${cmd[@]}" >"$TMPD/qd$qd.json"
done

fstype=$(df -PT "$DIR" | awk 'NR == 2 {print $2 " on " $1}')
dev=$(basename "$(df -P "$DIR" | awk 'NR == 2 {print $1}')")
[ -e "/sys/block/$dev" ] || dev=$(basename "$(dirname "$(readlink -f "/sys/class/block/$dev" 2>/dev/null)")" 2>/dev/null || true)
CMDS=$(printf '%s\n' "${cmds[@]}") DEV=$dev FSTYPE=$fstype SIZE=$SIZE ENGINE=$ENGINE NICE=$NICE \
DIR=$DIR QDS=$QDS TMPD=$TMPD OUT=$OUT python3 - <<'PY'
import json, os, platform, subprocess, datetime

def sh(c):
    try:
        return subprocess.run(c, shell=True, capture_output=True, text=True).stdout.strip()
    except Exception:
        return ""

tmpd, out, dev = os.environ["TMPD"], os.environ["OUT"], os.environ.get("DEV", "")
rows = []
for qd in os.environ["QDS"].split():
    j = json.load(open(f"{tmpd}/qd{qd}.json"))
    r = j["jobs"][0]["read"]
    lat = r["lat_ns"]
    pct = lat.get("percentile") or r["clat_ns"].get("percentile", {})
    rows.append({"qd": int(qd), "iops": r["iops"], "mb_s": r["bw_bytes"] / 1e6,
                 "mib_s": r["bw_bytes"] / 2**20,
                 "lat_mean_us": lat["mean"] / 1e3, "lat_p50_us": pct.get("50.000000", 0) / 1e3,
                 "lat_p99_us": pct.get("99.000000", 0) / 1e3, "lat_max_us": lat["max"] / 1e3,
                 "ios": r["total_ios"], "runtime_s": r["runtime"] / 1e3,
                 "fio_version": j.get("fio version")})
mem_kib = int(sh("awk '/MemTotal/ {print $2}' /proc/meminfo") or 0)
machine = {"hostname": platform.node(), "kernel": platform.release(),
           "cpu": sh("awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo"),
           "cpus": os.cpu_count(), "mem_gib": round(mem_kib / 2**20, 1),
           "device": ", ".join(f"{k} {v}" for k, v in zip(("name", "size", "rotational", "model"),
                     sh(f"lsblk -dno NAME,SIZE,ROTA,MODEL /dev/{dev} 2>/dev/null").split(None, 3))),
           "scheduler": sh(f"cat /sys/block/{dev}/queue/scheduler 2>/dev/null"),
           "filesystem": os.environ["FSTYPE"], "loadavg_after": sh("cat /proc/loadavg")}
res = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
       "machine": machine, "engine": os.environ["ENGINE"], "file_size": os.environ["SIZE"],
       "directory": os.environ["DIR"], "nice": os.environ["NICE"] or None,
       "commands": os.environ["CMDS"].splitlines(), "results": rows}
with open(f"{out}/device.json", "w") as f:
    json.dump(res, f, indent=1)
    f.write("\n")
m = machine
lines = [
    "# Device ceiling: random 4 KiB O_DIRECT reads (fio)", "",
    f"Measured {res['date']} by `benchmarks/device/fio_ceiling.sh` on {m['hostname']}: "
    f"{m['cpus']} CPUs ({m['cpu']}), {m['mem_gib']} GiB RAM, kernel {m['kernel']}; "
    f"device `{m['device'] or '?'}` (scheduler {m['scheduler']}), {m['filesystem']}; "
    f"test file {res['file_size']} under `{res['directory']}`, engine {res['engine']}, "
    f"one job per queue depth" + (f", run under `nice -n {res['nice']}`" if res['nice'] else "") + ".",
    "",
    "| queue depth | IOPS | MB/s | mean latency µs | p50 µs | p99 µs | max µs | reads | seconds |",
    "|---|---|---|---|---|---|---|---|---|",
]
for r in rows:
    lines.append(f"| {r['qd']} | {r['iops']:,.0f} | {r['mb_s']:.1f} | {r['lat_mean_us']:.1f} | "
                 f"{r['lat_p50_us']:.1f} | {r['lat_p99_us']:.1f} | {r['lat_max_us']:.0f} | "
                 f"{r['ios']:,} | {r['runtime_s']:.1f} |")
lines += ["", "Latency is fio's total latency (submission to completion), percentiles included. "
          "The IOPS at QD 64 is the ceiling the PostgreSQL runs are compared with "
          "(device reads per second ÷ this number); QD 1 is the latency floor of one dependent read.",
          "", "This is a virtual disk: the host may cache or throttle it, so the numbers describe "
          "this machine as the benchmarks see it, not the physical device. Other work on the "
          "shared machine at the time shows in the load average after the run: "
          f"`{m['loadavg_after']}`.", "", "Commands:", "", "```"] + res["commands"] + ["```", ""]
with open(f"{out}/device.md", "w") as f:
    f.write("\n".join(lines))
print("\n".join(lines))
PY
