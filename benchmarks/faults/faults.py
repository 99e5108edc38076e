"""The distributed lock's fault workload: N client processes (client.py) share one lock and one
resource while faults are injected, and the run is analysed from their logs. One table row per
backend and fault; see benchmarks/faults/README.md and docs/distributed_lock.md.

    faults.py [--short | --long] [--clients N] [--only SUBSTRING] [--markdown FILE] [--check]

The resource (a service in this process, over a UNIX socket) holds two counters that every
holder increments by read-modify-write: a FENCED one, whose read and write carry the holder's
token (refused when smaller than the largest token seen), and an UNFENCED one. Counted:
  holds          acquisitions in the run
  overlaps       holds during which another client acquired the lock (both believed they held it)
  stale acc.     fenced writes accepted with a token not newer than one another client used
                 (must be 0: the resource refuses smaller tokens, so only a duplicate can pass)
  lost fenced    fenced writes accepted over another holder's write (must be 0)
  lost unfenced  unfenced writes that overwrote another holder's (what fencing prevents)
  token order    holds whose token is not larger than that of a hold released before it began
  told / lost    holds the library reported lost (LOST event) / holds that were lost (another
                 client acquired during them, or the holder was told)
  learn ms       median and largest time from the loss (another's acquire, or the server's
                 restart: from its start, or the hold's if later) to the LOST event, over the holds
                 told
"""
import argparse
import json
import os
import random
import signal
import socketserver
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SERVERS = ROOT / "scripts" / "servers.sh"


# The short mode's scenarios (backend, a part of the fault's name): every kind of fault once,
# on the backends where it matters most, so that the test suite's run stays well under a minute.
SHORT = {("file", "(above ttl)"), ("redis", "mid-hold"), ("file", "holder SIGKILL"), ("postgres", "holder SIGKILL"),
         ("postgres", "client SIGSTOP"), ("postgres", "restart immediate"), ("postgres", "server SIGSTOP"),
         ("redis", "(above ttl)"), ("redis", "restart, no"), ("redis", "restart, AOF"), ("redis", "server SIGSTOP"),
         ("etcd", "(above ttl)"), ("etcd", "holder SIGKILL"), ("etcd", "restart"), ("etcd", "server SIGSTOP")}


# ---- The resource ----------------------------------------------------------------------------

class Resource:
    """The fenced and the unfenced counter, and what happened to their writes."""

    def __init__(self) -> None:
        self.mutex = threading.Lock()
        self.fenced = self.unfenced = 0
        self.max_token, self.owner = 0, None  # the largest token seen, and whose it was
        self.counts = dict(stale_accepted=0, stale_refused=0, lost_fenced=0, lost_unfenced=0, fenced_writes=0,
                           unfenced_writes=0)

    def answer(self, words: list) -> str:
        with self.mutex:
            op = words[0]
            if op == "R":  # fenced read: the token is recorded, so an older holder's write is refused
                client, token = int(words[1]), int(words[2])
                if token < self.max_token:
                    return "STALE"
                if token > self.max_token:
                    self.max_token, self.owner = token, client
                return f"OK {self.fenced}"
            if op == "W":
                client, token, value = int(words[1]), int(words[2]), int(words[3])
                if token < self.max_token:
                    self.counts["stale_refused"] += 1
                    return "STALE"
                if token == self.max_token and self.owner != client:
                    self.counts["stale_accepted"] += 1  # a token another client used: a duplicate
                self.max_token, self.owner = token, client
                if value - 1 != self.fenced:
                    self.counts["lost_fenced"] += 1
                self.fenced = value
                self.counts["fenced_writes"] += 1
                return "OK"
            if op == "UR":
                return str(self.unfenced)
            if op == "UW":
                value = int(words[2])
                if value - 1 != self.unfenced:
                    self.counts["lost_unfenced"] += 1
                self.unfenced = value
                self.counts["unfenced_writes"] += 1
                return "OK"
            return "ERR"


def serve(resource: Resource, path: str) -> socketserver.ThreadingUnixStreamServer:
    class Handler(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            try:
                for line in self.rfile:
                    self.wfile.write((resource.answer(line.decode().split()) + "\n").encode())
            except OSError:
                pass  # (a killed client)

    server = socketserver.ThreadingUnixStreamServer(path, Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# ---- The servers -----------------------------------------------------------------------------

def as_postgres(command: list) -> list:
    return ["runuser", "-u", "postgres", "--"] + command if os.geteuid() == 0 else command


class Servers:
    """Private PostgreSQL and Redis servers (scripts/servers.sh), and their faults."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        started = subprocess.run([str(SERVERS), "start", str(directory)], stdout=subprocess.DEVNULL)
        self.running = started.returncode == 0
        if not self.running:
            print(f"!!!!!! SKIPPING the PostgreSQL and Redis scenarios: scripts/servers.sh could not install or start "
                  f"the servers (status {started.returncode}) !!!!!!", file=sys.stderr)
            return
        self.pg_bin = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1]
        self.urls = {name: (directory / f"{name}.url").read_text().strip() for name in ("postgres", "redis")}
        self.redis_aof = False
        self.pg_synchronous_commit = True
        started = subprocess.run([str(SERVERS), "start-etcd", str(directory)], stdout=subprocess.DEVNULL)
        self.etcd_running = started.returncode == 0
        if self.etcd_running:
            self.urls["etcd"] = (directory / "etcd.url").read_text().strip()
        else:
            print(f"!!!!!! SKIPPING the etcd scenarios: scripts/servers.sh could not install or start etcd "
                  f"(status {started.returncode}) !!!!!!", file=sys.stderr)

    def stop(self) -> None:
        subprocess.run([str(SERVERS), "stop", str(self.dir)], stdout=subprocess.DEVNULL)

    def pause(self, what: str) -> None:
        subprocess.run([str(SERVERS), "pause", what, str(self.dir)], check=True)

    def resume(self, what: str) -> None:
        subprocess.run([str(SERVERS), "resume", what, str(self.dir)], check=True)

    def restart_postgres(self, mode: str, synchronous_commit: bool = True) -> None:
        pg_ctl = str(self.pg_bin / "pg_ctl")
        data = str(self.dir / "postgres")
        subprocess.run(as_postgres([pg_ctl, "-D", data, "-m", mode, "-w", "stop"]), check=True, stdout=subprocess.DEVNULL,
                       cwd="/")
        options = (f"-c listen_addresses=127.0.0.1 -c port={(self.dir / 'postgres.port').read_text().strip()} "
                   "-c unix_socket_directories='' -c fsync=off"
                   + ("" if synchronous_commit else " -c synchronous_commit=off"))
        subprocess.run(as_postgres([pg_ctl, "-D", data, "-l", str(self.dir / "postgres.log"), "-w", "-t", "60", "start",
                                    "-o", options]), check=True, stdout=subprocess.DEVNULL, cwd="/")
        self.pg_synchronous_commit = synchronous_commit

    def restart_etcd(self) -> None:
        """etcd stopped (SIGTERM) and started again on its data (leases and keys persist)."""
        subprocess.run([str(SERVERS), "restart", "etcd", str(self.dir)], check=True, stdout=subprocess.DEVNULL)

    def restart_redis(self, aof: bool) -> None:
        """A crash (SIGKILL) and a start, with the append-only file (fsync always) or without
        any persistence."""
        pidfile = self.dir / "redis" / "redis.pid"
        if pidfile.exists():
            pid = int(pidfile.read_text())
            subprocess.run(["kill", "-CONT", str(pid)])
            os.kill(pid, signal.SIGKILL)
            while Path(f"/proc/{pid}").exists():
                time.sleep(0.01)
            pidfile.unlink()
        port = (self.dir / "redis.port").read_text().strip()
        subprocess.run(["redis-server", "--bind", "127.0.0.1", "--port", port, "--requirepass", "secret", "--save", "",
                        "--appendonly", "yes" if aof else "no", "--appendfsync", "always",
                        "--dir", str(self.dir / "redis"), "--daemonize", "yes", "--pidfile", str(pidfile),
                        "--logfile", str(self.dir / "redis.log")], check=True, stdout=subprocess.DEVNULL)
        for _ in range(400):
            ping = subprocess.run(["redis-cli", "-p", port, "-a", "secret", "--no-auth-warning", "ping"],
                                  capture_output=True, text=True)
            if "PONG" in ping.stdout:
                self.redis_aof = aof
                return
            time.sleep(0.025)
        raise RuntimeError("redis-server did not start again")


# ---- A scenario ------------------------------------------------------------------------------

class Scenario:
    """A backend, a fault (an action of Run.inject, or a function), and the server settings it
    runs with (`setup`: Redis's AOF, PostgreSQL's synchronous_commit)."""

    def __init__(self, backend: str, fault: str, action, pause: float, aof: bool = False,
                 synchronous_commit: bool = True, work: tuple = (0.001, 0.005)) -> None:
        self.backend, self.fault, self.action, self.pause = backend, fault, action, pause
        self.aof, self.synchronous_commit = aof, synchronous_commit
        self.work = work  # how long a critical section works, seconds (uniform in the range)

    def setup(self, servers: "Servers") -> None:
        if self.backend == "redis" and servers.redis_aof != self.aof:
            servers.restart_redis(aof=self.aof)
        if self.backend == "postgres" and servers.pg_synchronous_commit != self.synchronous_commit:
            servers.restart_postgres("fast", synchronous_commit=self.synchronous_commit)


def etcd_ttl(ttl: float) -> float:
    """etcd's ttl for the run's `ttl`: its lease has whole seconds, 1 s at least."""
    return max(1.0, ttl)


def scenarios(servers: Servers, ttl: float) -> list:
    """Every backend's faults. `ttl` is Redis's lease; the pauses of the other backends are the
    same lengths (they have no lease: a stopped holder keeps the lock for the pause), except
    etcd's, which are those of its own ttl (`etcd_ttl`)."""
    below, above = 0.8 * ttl, 2.5 * ttl
    common = [("holder SIGSTOP %.1f s (below ttl)" % below, "stop_holder", below),
              ("holder SIGSTOP %.1f s (above ttl)" % above, "stop_holder", above),
              ("holder SIGKILL", "kill_holder", 0),
              ("client SIGSTOP in acquire %.1f s" % above, "stop_waiter", above)]
    out = [Scenario("file", name, action, pause) for name, action, pause in common]
    out += [Scenario("postgres", name, action, pause) for name, action, pause in common]
    out += [Scenario("postgres", "restart fast", lambda: servers.restart_postgres("fast"), 0),
            Scenario("postgres", "restart immediate", lambda: servers.restart_postgres("immediate"), 0),
            Scenario("postgres", "restart immediate, synchronous_commit=off",
                     lambda: servers.restart_postgres("immediate", synchronous_commit=False), 0, synchronous_commit=False),
            Scenario("postgres", "server SIGSTOP %.1f s" % above, "stop_server", above)]
    out += [Scenario("redis", name, action, pause) for name, action, pause in common]
    # Holds of 0.4 to 0.8 ttl, stopped at a random point of the hold: a pause that begins
    # just before a renewal is due (issue 24, defect 1).
    out += [Scenario("redis", "holder SIGSTOP %.1f s mid-hold (below ttl)" % below, "stop_holder", below,
                     work=(0.4 * ttl, 0.8 * ttl))]
    out += [Scenario("redis", "restart, no persistence", lambda: servers.restart_redis(aof=False), 0),
            Scenario("redis", "restart, AOF (fsync always)", lambda: servers.restart_redis(aof=True), 0, aof=True),
            Scenario("redis", "server SIGSTOP %.1f s" % above, "stop_server", above)]
    e_below, e_above = 0.8 * etcd_ttl(ttl), 2.5 * etcd_ttl(ttl)
    out += [Scenario("etcd", "holder SIGSTOP %.1f s (below ttl)" % e_below, "stop_holder", e_below),
            Scenario("etcd", "holder SIGSTOP %.1f s (above ttl)" % e_above, "stop_holder", e_above),
            Scenario("etcd", "holder SIGKILL", "kill_holder", 0),
            Scenario("etcd", "client SIGSTOP in acquire %.1f s" % e_above, "stop_waiter", e_above),
            Scenario("etcd", "restart", servers.restart_etcd, 0),
            Scenario("etcd", "server SIGSTOP %.1f s" % e_above, "stop_server", e_above)]
    return out


class Run:
    """One scenario's clients, faults and logs."""

    def __init__(self, scenario: Scenario, target: str, work: Path, clients: int, seconds: float,
                 servers: Servers) -> None:
        self.scenario, self.target, self.work, self.seconds, self.servers = scenario, target, work, seconds, servers
        self.log = work / "log.jsonl"
        self.resource = Resource()
        self.socket = str(work / "resource.sock")
        self.server = serve(self.resource, self.socket)
        self.clients = clients
        self.state_path = work / "state"
        self.state_path.write_bytes(bytes(clients + 1))  # a byte per client (holding), and "stop"
        self.procs = {i: self.spawn(i) for i in range(clients)}
        self.faults = []  # (monotonic time, what)

    def spawn(self, client: int) -> subprocess.Popen:
        lo, hi = self.scenario.work
        return subprocess.Popen([sys.executable, str(HERE / "client.py"), self.target, self.socket, str(self.log),
                                 str(client), str(self.clients), str(self.state_path), str(lo), str(hi)], env=os.environ)

    def tell_clients_to_stop(self) -> None:
        with open(self.state_path, "r+b") as state:
            state.seek(self.clients)
            state.write(b"\1")

    def stopped_client(self, holding: bool):
        """A client stopped (SIGSTOP) while it holds the lock (`holding`) or while it does not
        (then most likely waiting in acquire), as its state byte says once it is stopped; None
        if none was found in 2 s."""
        for _ in range(1000):
            candidates = [(i, p) for i, p in self.procs.items() if p.poll() is None
                          and (self.state_path.read_bytes()[i] == 1) == holding]
            if candidates:
                i, p = random.choice(candidates)
                os.kill(p.pid, signal.SIGSTOP)
                os.waitid(os.P_PID, p.pid, os.WSTOPPED | os.WNOWAIT)  # (stopped now)
                if (self.state_path.read_bytes()[i] == 1) == holding:
                    return i, p
                os.kill(p.pid, signal.SIGCONT)
            time.sleep(0.002)
        return None

    def inject(self) -> None:
        s = self.scenario
        now = time.monotonic()
        if callable(s.action):
            s.action()
            self.faults.append((now, "restart", time.monotonic()))
        elif s.action == "stop_server":
            self.servers.pause(s.backend)
            time.sleep(s.pause)
            self.servers.resume(s.backend)
            self.faults.append((now, "server stopped", time.monotonic()))
        else:
            found = self.stopped_client(holding=s.action != "stop_waiter")
            if found is None:
                return
            i, p = found
            self.faults.append((time.monotonic(), s.action, time.monotonic()))
            if s.action == "kill_holder":
                p.kill()
                p.wait()
                self.procs[i] = self.spawn(i)
            else:
                time.sleep(s.pause)
                os.kill(p.pid, signal.SIGCONT)

    def run(self, injections: int) -> dict:
        """The scenario's time counts from the first hold (the clients take a while to start);
        its faults are spread over it, the first after a quarter of a gap."""
        for _ in range(3000):
            if any(self.state_path.read_bytes()[:self.clients]):
                break
            time.sleep(0.005)
        start = time.monotonic()
        gap = self.seconds / max(1, injections)
        for k in range(injections):
            delay = start + (k + 0.25) * gap - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self.inject()
        delay = start + self.seconds - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        self.tell_clients_to_stop()
        for p in self.procs.values():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.server.shutdown()
        self.server.server_close()
        return analyse(self.log, self.resource.counts, self.faults)


# ---- Analysis ----------------------------------------------------------------------------------

def analyse(log: Path, counts: dict, faults: list) -> dict:
    records = [json.loads(line) for line in log.read_text().splitlines() if line.strip()] if log.exists() else []
    records.sort(key=lambda r: r["t"])
    last_seen = {}  # pid -> its last record's time (a killed client's hold ends there)
    for r in records:
        last_seen[r["pid"]] = r["t"]
    holds, open_holds = [], {}
    told = {}  # pid -> times of LOST events
    for r in records:
        pid = r["pid"]
        if r["kind"] == "acquired":
            open_holds[pid] = dict(pid=pid, client=r["client"], start=r["t"], token=r["token"], end=None, lost_release=False)
        elif r["kind"] in ("releasing",) and pid in open_holds:
            open_holds[pid]["end"] = r["t"]
        elif r["kind"] in ("released", "release_lost", "release_error") and pid in open_holds:
            hold = open_holds.pop(pid)
            hold["lost_release"] = r["kind"] == "release_lost"
            holds.append(hold)
        elif r["kind"] == "lost":
            told.setdefault(pid, []).append(r["t"])
    for hold in open_holds.values():  # killed while holding: it held until it died
        hold["end"] = hold["end"] or last_seen[hold["pid"]]
        holds.append(hold)
    for hold in holds:
        hold["end"] = hold["end"] or hold["start"]
        hold["told"] = []
    holds.sort(key=lambda h: h["start"])
    by_pid = {}
    for hold in holds:
        by_pid.setdefault(hold["pid"], []).append(hold)
    for pid, times in told.items():  # an event is about the latest hold its process had begun
        for t in times:
            begun = [h for h in by_pid.get(pid, []) if h["start"] <= t]
            if begun:
                begun[-1]["told"].append(t)

    overlaps, lost, learn = 0, 0, []
    restarts = [(t, until) for t, what, until in faults if what == "restart"]
    for i, h in enumerate(holds):
        taken = [g["start"] for g in holds[i + 1:] if g["start"] < h["end"] and g["client"] != h["client"]]
        overlaps += 1 if taken else 0
        events = h["told"]
        broken = [max(t, h["start"]) for t, until in restarts if t <= h["end"] and until >= h["start"]]
        if taken or events or h["lost_release"]:
            lost += 1
        if events:
            losses = taken + broken
            if losses:
                learn.append((events[0] - min(losses)) * 1000)

    order = 0
    seen_tokens = set()
    ended = sorted(holds, key=lambda h: h["end"])
    best, j = 0, 0
    for h in holds:  # by start
        while j < len(ended) and ended[j]["end"] < h["start"]:
            best = max(best, ended[j]["token"])
            j += 1
        if h["token"] <= best or h["token"] in seen_tokens:
            order += 1
        seen_tokens.add(h["token"])

    return dict(holds=len(holds), overlaps=overlaps, stale_accepted=counts["stale_accepted"],
                stale_refused=counts["stale_refused"], lost_fenced=counts["lost_fenced"],
                lost_unfenced=counts["lost_unfenced"], token_order=order,
                told=sum(1 for h in holds if h["told"]),
                lost=lost, learn_median=statistics.median(learn) if learn else None,
                learn_max=max(learn) if learn else None, faults=len(faults))


def table(rows: list) -> str:
    def ms(value):
        return "-" if value is None else f"{value:.0f}"
    lines = ["| backend | fault | holds | overlaps | stale acc. | lost fenced | lost unfenced | token order "
             "| told / lost | learn ms (median / max) |",
             "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for backend, fault, r in rows:
        lines.append(f"| {backend} | {fault} | {r['holds']} | {r['overlaps']} | {r['stale_accepted']} | "
                     f"{r['lost_fenced']} | {r['lost_unfenced']} | {r['token_order']} | {r['told']} / {r['lost']} | "
                     f"{ms(r['learn_median'])} / {ms(r['learn_max'])} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--short", action="store_true",
                      help="every kind of fault once (16 scenarios), 1 s each, 3 clients (the test suite's)")
    mode.add_argument("--long", action="store_true", help="40 s per scenario, a fault every 5 s")
    parser.add_argument("--clients", type=int, default=None)
    parser.add_argument("--only", default="", help="run the scenarios whose 'backend: fault' contains this")
    parser.add_argument("--markdown", help="write the table to this file too")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if a fenced write was lost or a stale one accepted, or tokens went backwards")
    args = parser.parse_args()
    if args.long:
        seconds, injections, ttl, clients = 40.0, 8, 1.0, 6
    elif args.short:
        seconds, injections, ttl, clients = 1.0, 1, 0.4, 3
    else:
        seconds, injections, ttl, clients = 8.0, 2, 1.0, 4
    clients = args.clients or clients

    work = Path(tempfile.mkdtemp(prefix="libsync-faults-"))
    os.chmod(work, 0o755)
    began = time.monotonic()
    servers = Servers(work / "servers")
    print(f"servers started in {time.monotonic() - began:.1f} s", flush=True)
    rows, failed = [], []
    try:
        for n, s in enumerate(scenarios(servers, ttl)):
            if args.only not in f"{s.backend}: {s.fault}":
                continue
            if args.short and not any(s.backend == b and f in s.fault for b, f in SHORT):
                continue
            if s.backend != "file" and not servers.running:
                continue
            if s.backend == "etcd" and not servers.etcd_running:
                continue
            s.setup(servers)
            place = work / f"s{n}"
            place.mkdir()
            if s.backend == "file":
                target = str(place / "lock")
            elif s.backend == "postgres":
                target = f"{servers.urls['postgres']}?lock=faults{n}&connect_timeout=2"
            elif s.backend == "etcd":
                target = f"{servers.urls['etcd']}?lock=faults{n}&ttl={etcd_ttl(ttl):g}&connect_timeout=1"
            else:
                target = f"{servers.urls['redis']}?lock=faults{n}&ttl={ttl}&connect_timeout=1"
            began = time.monotonic()
            result = Run(s, target, place, clients, seconds, servers).run(injections)
            result["seconds"] = time.monotonic() - began
            rows.append((s.backend, s.fault, result))
            print(f"{s.backend:8} {s.fault:45} holds {result['holds']:5} overlaps {result['overlaps']:3} "
                  f"stale-acc {result['stale_accepted']} lost-fenced {result['lost_fenced']} "
                  f"lost-unfenced {result['lost_unfenced']} order {result['token_order']} "
                  f"told {result['told']}/{result['lost']} faults {result['faults']} ({result['seconds']:.1f} s)", flush=True)
            bad = result["lost_fenced"] or result["stale_accepted"] or result["token_order"]
            if bad or result["holds"] == 0:
                failed.append(f"{s.backend}: {s.fault}")
    finally:
        servers.stop()
        subprocess.run(["rm", "-rf", str(work)])
    text = table(rows)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    if args.check and failed:
        print("FAILED (a fenced write lost or stale one accepted, tokens out of order, or no hold at all): "
              + "; ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
