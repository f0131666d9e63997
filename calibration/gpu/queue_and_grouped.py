"""One GPU, one short call (about 15 s): what the compute model's fit needed beyond the 2026-11-26 tables.

    python3 calibration/gpu/queue_and_grouped.py OUTDIR     # writes OUTDIR/queue-grouped.json, prints rows

Run as is on a lent H200 on 2026-11-26, after the precision tables (measured/h200-2026-11-26-queue-grouped.json).
The code is compact because it was sent inline (the device call takes a 2,000-character command); it is exactly
what ran. Sections:
- lone_queued: each kernel timed lone (CUDA events around one call, as the GEMM tables were) and queued (events
  around 50 back-to-back calls / 50, as a training step's stream runs them). Rows: (kernel, lone us, queued us).
- streaming: copy, add and gelu on 8192 x 8192 in bf16 and fp32, and a fused AdamW step over 64M fp32 parameters.
  Rows: (op, dtype, us, GB/s counting bytes read + written: copy 2, add 3, gelu 2 per element, AdamW 28 per param).
- grouped: torch._grouped_mm (bf16) at a fixed total of tokens split balanced, half on one expert, one busy expert
  (the rest 16 each), half the experts empty; with the busiest expert's GEMM alone. Rows: (GEMM, G, total, split,
  grouped us, busiest alone us); the splits are built in `gi`.
- fp32_attention: causal SDPA in fp32, b 1, 32 heads, s 4096, d 128, MHA (kv 32) and GQA (kv 8, enable_gqa), with
  allow_tf32 off and on. Rows: (tf32, kv heads, forward us, forward + backward us).
"""
import json,statistics as st,sys,torch,torch.nn.functional as F
E=torch.cuda.Event;R={};B=torch.bfloat16;D='cuda'
def ms(f,r=10,i=1):
 for _ in range(3):f()
 torch.cuda.synchronize();t=[]
 for _ in range(r):
  a,b=E(enable_timing=1),E(enable_timing=1);a.record()
  for _ in range(i):f()
  b.record();b.synchronize();t.append(a.elapsed_time(b)/i)
 return st.median(t)*1e3
def sec(n,f):
 R[n]=[]
 try:f(R[n])
 except Exception as e:print(n,'FAILED',repr(e)[:300])
def lq(o):
 c={}
 for m,n,k in((64,1536,2048),(64,4096,7168),(1024,1024,1024),(256,28672,4096),(2048,2048,2048),(4096,4096,4096)):
  a=torch.randn(m,k,device=D,dtype=B);b=torch.randn(k,n,device=D,dtype=B);c[f'gemm {m}x{n}x{k}']=lambda a=a,b=b:a@b
 x=torch.randn(8192,4096,device=D,dtype=B);y=torch.randn_like(x);s=torch.randn(2048,4096,device=D,dtype=B)
 c['add 8192x4096']=lambda:x+y;c['gelu 2048x4096']=lambda:F.gelu(s)
 for k,f in c.items():o.append((k,ms(f,20),ms(f,5,50)));print('LQ',*o[-1],flush=1)
def sm(o):
 for dt in(B,torch.float32):
  x=torch.randn(8192,8192,device=D,dtype=dt);y=torch.randn_like(x);z=torch.empty_like(x);e=x.numel()*x.element_size()
  for k,nb,f in(('copy',2*e,lambda:z.copy_(x)),('add',3*e,lambda:torch.add(x,y,out=z)),('gelu',2*e,lambda:F.gelu(x))):
   u=ms(f);o.append((k,str(dt),u,nb/u/1e3));print('SM',*o[-1],flush=1)
 n=1<<26;p=[torch.nn.Parameter(torch.randn(n//16,device=D))for _ in range(16)]
 for q in p:q.grad=torch.randn_like(q)
 O=torch.optim.AdamW(p,fused=True);u=ms(O.step);o.append(('adamw','fp32',u,28*n/u/1e3));print('SM',*o[-1],flush=1)
def sp(t,g):
 b=t//g//16*16;r=[b]*g
 for i in range((t-b*g)//16):r[i%g]+=16
 return r
def gi(o):
 for nm,(n,k) in{'dsv3up':(4096,7168),'qwenup':(1536,2048)}.items():
  for g,t in((32,8192),(8,4096)):
   w=torch.randn(g,n,k,device=D,dtype=B).transpose(-2,-1);x=torch.randn(t,k,device=D,dtype=B)
   for sn,tk in{'bal':[t//g]*g,'half1':[t//2]+sp(t-t//2,g-1),'onebusy':[t-16*(g-1)]+[16]*(g-1),'halfempty':[2*t//g]*(g//2)+[0]*(g-g//2)}.items():
    try:
     of=torch.tensor(tk,device=D,dtype=torch.int32).cumsum(0,dtype=torch.int32);u=ms(lambda:torch._grouped_mm(x,w,offs=of))
     a=torch.randn(max(tk),k,device=D,dtype=B);v=ms(lambda:a@w[0]);o.append((nm,g,t,sn,u,v));print('GI',*o[-1],flush=1)
    except Exception as e:print('GI',nm,g,sn,repr(e)[:200])
def fa(o):
 for tf in(0,1):
  torch.backends.cuda.matmul.allow_tf32=bool(tf)
  for kv in(32,8):
   q=torch.randn(1,32,4096,128,device=D,requires_grad=True);k,v=(torch.randn(1,kv,4096,128,device=D,requires_grad=True)for _ in'ab');gr=torch.randn_like(q)
   f=lambda:F.scaled_dot_product_attention(q,k,v,is_causal=True,enable_gqa=kv<32)
   o.append((tf,kv,ms(f,5),ms(lambda:f().backward(gr),5)));print('FA',*o[-1],flush=1)
for n,f in(('lone_queued',lq),('streaming',sm),('grouped',gi),('fp32_attention',fa)):sec(n,f)
R['device']=torch.cuda.get_device_name();json.dump(R,open(sys.argv[1]+'/queue-grouped.json','w'))
