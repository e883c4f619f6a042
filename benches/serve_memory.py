# Usage (from the repository root): python3 benches/serve_memory.py target/release/llmsim 20
# (the binary, then how long each client reads before it hangs up, in seconds); prints one JSON line.
# 30 concurrent streamed chats at the documented bounds (n=1024, max_tokens=2048, ignore_eos),
# each read for HOLD seconds then closed; /health polled every 50 ms; server RSS sampled.
# The poller is a process of its own: as a thread of this one it waited for Python's lock behind
# the 30 reading threads, which added up to ~100 ms to its measured latency.
import socket, subprocess, sys, threading, time, json
if sys.argv[1] == "--poll":  # the /health poller: port, seconds; prints each latency in seconds
    port, until = int(sys.argv[2]), time.time() + float(sys.argv[3]); lat = []
    while time.time() < until:
        t = time.time(); s = socket.create_connection(("127.0.0.1", port)); s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        while s.recv(4096): pass
        s.close(); lat.append(time.time()-t); time.sleep(0.05)
    print(json.dumps(lat)); sys.exit(0)
binary, hold = sys.argv[1], float(sys.argv[2])
p = subprocess.Popen([binary, "serve", "--port", "0", "--models", "scenarios/serve/memory-models.yml"], stdout=subprocess.PIPE, stderr=open("stderr.txt","w"))
port = int(p.stdout.readline().decode().strip().rsplit(":",1)[1])
def status(pid):
    d = {}
    for l in open(f"/proc/{pid}/status"):
        k, v = l.split(":",1); d[k] = v.strip()
    return int(d["VmRSS"].split()[0])//1024, int(d["VmHWM"].split()[0])//1024
base = status(p.pid)
body = json.dumps({"model":"sched","messages":[{"role":"user","content":"hello"}],"stream":True,"n":1024,"max_tokens":2048,"ignore_eos":True}).encode()
req = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
got = [0]*30
def client(i):
    s = socket.create_connection(("127.0.0.1", port)); s.sendall(req); end = time.time()+hold
    s.settimeout(1.0)
    while time.time() < end:
        try:
            k = s.recv(65536)
        except socket.timeout: continue
        if not k: break
        got[i] += len(k)
    s.close()
h = subprocess.Popen([sys.executable, sys.argv[0], "--poll", str(port), str(hold + 3)], stdout=subprocess.PIPE)
peak = 0
ts = [threading.Thread(target=client, args=(i,)) for i in range(30)]
[t.start() for t in ts]
while any(t.is_alive() for t in ts):
    time.sleep(0.2); peak = max(peak, status(p.pid)[0])
time.sleep(3)
after = status(p.pid)
lat = json.loads(h.communicate()[0])
p.terminate(); p.wait()
print(json.dumps({"baseline_rss_mb": base[0], "peak_rss_mb": peak, "vmhwm_mb": after[1], "rss_after_close_mb": after[0],
  "health_max_ms": round(max(lat)*1000,1), "health_p50_ms": round(sorted(lat)[len(lat)//2]*1000,1), "health_polls": len(lat),
  "bytes_read_mb": round(sum(got)/1e6,1)}))
