# The prediction aid of experiments 15 and 16 (results/15-*.md, 16-*.md),
# written before their first run: an independent, simplified step model of
# docs/engine.md's rules (FIFO admission with the watermark, a 2,048-token
# budget, prompts chunked, the roofline with the deployment terms of
# docs/deployments.md and the base's calibration) for 3 colocated TP 1
# replicas behind a random router, and a TP 2 prefill replica feeding a TP 1
# decode replica. Its own random draws (Python's Mersenne Twister, 30 seeds),
# not llmsim's: it predicts the means, not the seeds. Run: python3 this file
# (about 30 s). It printed, before llmsim ran either experiment:
#   3 coloc ttft 157.6 tpot 30.3 | split ttft 95.8 tpot 34.4
#   6 coloc ttft 182.2 tpot 38.9 | split ttft 130.1 tpot 49.6
#   9 coloc ttft 218.7 tpot 49.5 | split ttft 206.2 tpot 81.1
import random,math,statistics as st
def ln(rng,m,s,mx):
  mu=math.log(m*m/math.sqrt(m*m+s*s)); sg=math.sqrt(math.log(1+s*s/(m*m)))
  return min(mx,max(1,round(rng.lognormvariate(mu,sg))))
L=40;H=5120;V=50272;I=13653
lin=2*L*(4*H*H+3*H*I); W=25681029120; kvb=819200
BW=2039e9*0.68; FL=312e12*0.5; OVH=5e-3; SEQ=61e-6
def step_time(items,t=1,sampled=0):
  # items: list of (n_new, c_cached)
  T=sum(n for n,c in items)
  fl=lin*T+sum(4*L*H*(n*c+n*(n+1)/2) for n,c in items)+2*H*V*sampled
  comp=fl/(t*FL); mem=(W/t+sum((n+c) for n,c in items)*kvb/t)/BW
  comm=0 if t==1 else 2*L*(10.4e-6+2*(t-1)/t*T*H*2/58e9)
  return max(comp,mem)+comm+OVH+SEQ*len(items)
BLOCKS=3938; WM=39
def run_engine(arrivals, t=1, prefill_only=False, decode_arrivals=False):
  """arrivals: list of (time, req) sorted. Returns per-request events via req dict."""
  q=list(arrivals); wait=[]; run=[]; now=0.0
  while q or wait or run:
    while q and q[0][0]<=now: wait.append(q.pop(0)[1])
    if not wait and not run: now=q[0][0]; continue
    budget=2048; items=[]; used=sum(math.ceil(r['c_need']/16) for r in run)
    sched=[]
    for r in run:
      if budget<=0: break
      k=min(r['P']+r['g']-r['c'],budget); budget-=k; sched.append((r,k))
    while wait and budget>0 and len(run)<256:
      r=wait[0]; need=math.ceil((r['P']+r['g'])/16)
      if BLOCKS-used-need<WM: break
      wait.pop(0); used+=need; run.append(r); r['c_need']=r['P']+r['g']
      k=min(r['P']+r['g']-r['c'],budget); budget-=k; sched.append((r,k))
    if not sched: now=q[0][0] if q else now; continue
    sampled=[r for r,k in sched if r['c']+k==r['P']+r['g']]
    dt=step_time([(k,r['c']) for r,k in sched],t,len(sampled))
    now+=dt
    for r,k in sched:
      r['c']+=k
      if r['c']==r['P']+r['g']:
        r['g']+=1; r['times'].append(now); r['c_need']=r['P']+r['g']
    for r in list(run):
      if r['g']>=r['N'] or (prefill_only and r['g']>=1):
        run.remove(r); r['done']=now
  return now
def make(R,seed,n=300):
  rng=random.Random(seed); t=0; out=[]
  for i in range(n):
    t+=rng.expovariate(R); out.append(dict(a=t,P=ln(rng,780,518,2003),N=ln(rng,176,211,1085),g=0,c=0,times=[]))
  return out
def stats(reqs):
  ttft=[r['times'][0]-r['a'] for r in reqs]
  tpot=[(r['times'][-1]-r['times'][0])/(r['N']-1) for r in reqs if r['N']>1]
  return st.mean(ttft)*1e3, st.mean(tpot)*1e3
def coloc(R,seed):
  reqs=make(R,seed); rng=random.Random(seed+999)
  parts=[[],[],[]]
  for r in reqs: parts[rng.randrange(3)].append((r['a'],r))
  for p in parts: run_engine(p)
  return stats(reqs)
def split(R,seed,bw=150e9):
  reqs=make(R,seed)
  pre=[dict(r,N=1,times=[]) for r in reqs]
  run_engine([(r['a'],r) for r in pre],t=2,prefill_only=True)
  dec=[]
  for r,p in zip(reqs,pre):
    r['times']=[p['times'][0]]
    if r['N']>1:
      arr=p['times'][0]+r['P']*kvb/bw
      r['g']=1; r['c']=r['P']
      dec.append((arr,r))
  dec.sort(key=lambda x:x[0])
  run_engine(dec)
  return stats(reqs)
for R in (3,6,9):
  c=[coloc(R,s) for s in range(30)]; d=[split(R,s) for s in range(30)]
  f=lambda xs,i: round(st.mean(x[i] for x in xs),1)
  print(R,'coloc ttft',f(c,0),'tpot',f(c,1),'| split ttft',f(d,0),'tpot',f(d,1))
