#!/usr/bin/env python3
"""Where int8 error comes from in bench/gen_encoder.py's encoder: a numpy model of
slimserve's dynamic int8 (per-row u8 activations with a zero point, per-output-channel
s8 weights, the outlier-row split), with each product kind (qkv, ao = attention output,
f1 = FFN in, f2 = FFN out) int8 or float, weights or activations float, and weight
scales max|w|/127 or least-squared-error (grid of 36 in [0.3, 1]), and the kinds in
mode['two'] with a second int8 weight for the first one's rounding error (quant/int8.c's
SLIM_INT8_RESIDUAL; its product on the same u8 activations). Prints cosines of the last
hidden state to fp32 for one sequence.

    .venv/bin/python bench/int8_error_sim.py ENCODER.onnx     (about 1 minute for seq 16)
"""
import numpy as np, onnx, sys, math
from onnx import numpy_helper
m = onnx.load(sys.argv[1]); W = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
erf = np.vectorize(math.erf)
def ln(x, n):
    mu = x.mean(-1, keepdims=True); v = ((x-mu)**2).mean(-1, keepdims=True)
    return (x-mu)/np.sqrt(v+1e-12)*W[n+'.weight']+W[n+'.bias']
def qact(x, blk=None):
    if blk:
        out = np.empty_like(x)
        for c in range(0, x.shape[1], blk): out[:, c:c+blk] = qact(x[:, c:c+blk])
        return out
    lo = np.minimum(x.min(1, keepdims=True), 0); hi = np.maximum(x.max(1, keepdims=True), 0)
    s = (hi-lo)/255; zp = np.round(-lo/s); q = np.clip(np.round(x/s)+zp, 0, 255)
    return (q-zp)*s
def mse_scale(w, grid):
    m = np.abs(w).max(0)/127
    if not grid: return m
    best = m.copy(); be = ((w - np.clip(np.round(w/m), -127, 127)*m)**2).sum(0)
    for f in np.linspace(0.3, 1.0, grid)[:-1]:
        s = m*f; e = ((w - np.clip(np.round(w/s), -127, 127)*s)**2).sum(0)
        better = e < be; best[better] = s[better]; be[better] = e[better]
    return best
def qlin(x, w, mode, kind=''):
    K = w.shape[0]; rms = np.sqrt((w**2).mean(1)); med = np.sort(rms)[K//2]
    cap = K//16; least = np.sort(rms)[K-cap]
    o = np.where((rms > 3*med) & (rms >= least))[0][:cap]
    main = w.copy(); main[o] = 0
    sw = mse_scale(main, mode.get('grid', 0)); wq = np.clip(np.round(main/sw), -127, 127)*sw
    wo = w[o]; so = np.abs(wo).max(0)/127; woq = np.round(wo/so)*so
    xa = x.copy()
    if mode.get('zero_outl'): xa[:, o] = 0
    xq = x if mode.get('fact') else qact(xa, mode.get('blk'))
    if mode.get('fw'): wq = main; woq = wo
    y = xq @ wq + x[:, o] @ woq
    if kind in mode.get('two', ()):  # a second int8 weight: the first one's rounding error
        r = main - wq; sr = np.abs(r).max(0)/127; sr[sr == 0] = 1
        y = y + xq @ (np.round(r/sr)*sr)
    return y
def fwd(ids, q=set(), mode={}):
    S = ids.shape[1]; H = 768; nh = 12; dh = 64
    h = W['embeddings.word'][ids[0]] + W['embeddings.position'][:S]
    h = ln(h, 'embeddings.ln')
    def lin(x, name, kind):
        w = W[name+'.weight']
        y = qlin(x, w, mode, kind) if kind in q else x @ w
        return y + W[name+'.bias']
    for i in range(12):
        n = f'layer{i}'
        Q = lin(h, n+'.query', 'qkv'); Kk = lin(h, n+'.key', 'qkv'); V = lin(h, n+'.value', 'qkv')
        Q = Q.reshape(S, nh, dh).transpose(1, 0, 2); Kk = Kk.reshape(S, nh, dh).transpose(1, 2, 0); V = V.reshape(S, nh, dh).transpose(1, 0, 2)
        s = Q @ Kk / 8.0; p = np.exp(s - s.max(-1, keepdims=True)); p /= p.sum(-1, keepdims=True)
        c = (p @ V).transpose(1, 0, 2).reshape(S, H)
        h = ln(h + lin(c, n+'.attn_out', 'ao'), n+'.ln1')
        f = lin(h, n+'.ffn_in', 'f1'); f = f*0.5*(1+erf(f/math.sqrt(2)))
        h = ln(h + lin(f, n+'.ffn_out', 'f2'), n+'.ln2')
    return h
def cos(a, b): a = a.ravel(); b = b.ravel(); return a@b/np.linalg.norm(a)/np.linalg.norm(b)


allq = {'qkv', 'ao', 'f1', 'f2'}
ids = np.random.default_rng(1).integers(0, 30522, (1, 16)); ref = fwd(ids)
print('all int8', cos(ref, fwd(ids, allq)), 'float activations', cos(ref, fwd(ids, allq, {'fact': 1})),
      'float weights', cos(ref, fwd(ids, allq, {'fw': 1})))
for k in sorted(allq):
    print('only', k, 'int8:', cos(ref, fwd(ids, {k})), ' all but', k, ':', cos(ref, fwd(ids, allq - {k})))
print('second int8 weight on qkv + ao (the default, "square")',
      cos(ref, fwd(ids, allq, {'grid': 16, 'two': {'qkv', 'ao'}})))
for seed in (1, 2, 4):
    ids = np.random.default_rng(seed).integers(0, 30522, (1, 16)); ref = fwd(ids)
    print('seed', seed, 'max', cos(ref, fwd(ids, allq)), 'mse grid 36', cos(ref, fwd(ids, allq, {'grid': 36})), 'w only', cos(ref, fwd(ids, allq, {'grid': 36, 'fact': 1})), flush=True)
