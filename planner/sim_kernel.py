"""The simulator's step loop (planner.simulate), compiled with numba.

Why compiled: certification replays every pool of a plan, and a bisection for a pool's
simulated capacity replays it a handful of times; a long-context pool takes millions of
steps. In Python the loop costs about 1.7 µs a step; compiled, a few tens of nanoseconds.

The scheduler and the step-time composition are planner.simulate's (its module docstring
states them); this module holds only the loop, over arrays: the running set and the
prefilling set are doubly linked lists in admission order (append, remove, newest in
O(1)), the waiting queue a ring buffer, and the completions a binary heap keyed by
(finish step, request). The per-step records are arrays the caller allocates (planner.simulate
sizes them); the rarer records (preemptions, resumptions) grow by doubling.

Compiled on first use and cached on disk (beside this file, else the user's cache
folder), so later processes only load it; where no cache folder is writable, each
process compiles (a few seconds).

Loading numba's CPU target (on the first call) imports numba.np.arraymath, which probes for
BLAS by importing scipy.linalg: 0.13 s of the 0.25 s a first call costs, measured, on the
path of every certified solve (the replays wait for it). This loop uses no linear algebra, so
the probe is answered "no BLAS" (_without_blas_probe); numba's linear algebra, should
anything in the process compile it later, imports scipy itself when it is typed.
"""

from __future__ import annotations

import sys
from contextlib import suppress

import numpy as np
from numba import njit

_BLAS = "scipy.linalg.cython_blas"  # what numba.np.arraymath imports to probe for BLAS


def _without_blas_probe() -> None:
    """Import numba.np.arraymath with its BLAS probe failing at once (a None entry in
    sys.modules makes that import raise ImportError, which numba takes as "no BLAS": its
    inner products then use a plain loop, in np.correlate and np.convolve only)."""
    if "numba.np.arraymath" in sys.modules or _BLAS in sys.modules:
        return  # loaded already, or scipy's BLAS already imported: the probe costs nothing
    sys.modules[_BLAS] = None
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        if sys.modules.get(_BLAS, 0) is None:
            with suppress(KeyError):
                del sys.modules[_BLAS]


_without_blas_probe()

_NONE = -1


@njit(cache=True, nogil=True)
def _grow(a, size):
    if size < a.size:
        return a
    b = np.empty(a.size * 2, a.dtype)
    b[: a.size] = a
    return b


@njit(cache=True, nogil=True)
def _unlink(prev, nxt, i, head, tail):
    """Remove i from a doubly linked list over request indices; returns the new (head, tail)."""
    p, q = prev[i], nxt[i]
    if p != _NONE:
        nxt[p] = q
    else:
        head = q
    if q != _NONE:
        prev[q] = p
    else:
        tail = p
    return head, tail


@njit(cache=True, nogil=True)
def _append(prev, nxt, i, head, tail):
    """Append i to the end of a doubly linked list; returns the new (head, tail)."""
    prev[i], nxt[i] = tail, _NONE
    if tail == _NONE:  # the list was empty: i is its head too
        return i, i
    nxt[tail] = i
    return head, i


@njit(cache=True, nogil=True)
def _heap_push(hs, hr, he, size, step, req, ep):
    i = size
    hs[i], hr[i], he[i] = step, req, ep
    while i > 0:
        parent = (i - 1) // 2
        if hs[parent] < hs[i] or (hs[parent] == hs[i] and hr[parent] <= hr[i]):
            break
        hs[i], hs[parent] = hs[parent], hs[i]
        hr[i], hr[parent] = hr[parent], hr[i]
        he[i], he[parent] = he[parent], he[i]
        i = parent
    return size + 1


@njit(cache=True, nogil=True)
def _heap_pop(hs, hr, he, size):
    size -= 1
    hs[0], hr[0], he[0] = hs[size], hr[size], he[size]
    i = 0
    while True:
        left, right, small = 2 * i + 1, 2 * i + 2, i
        if left < size and (hs[left] < hs[small] or (hs[left] == hs[small] and hr[left] < hr[small])):
            small = left
        if right < size and (hs[right] < hs[small] or (hs[right] == hs[small] and hr[right] < hr[small])):
            small = right
        if small == i:
            return size
        hs[i], hs[small] = hs[small], hs[i]
        hr[i], hr[small] = hr[small], hr[i]
        he[i], he[small] = he[small], he[i]
        i = small


@njit(cache=True, nogil=True)
def _pages(blocks, full_pages, win_pages, win_blocks):
    """Pages a sequence of `blocks` blocks holds: each full-attention group a page a block, each
    capped group (sliding window, chunk) a page a block of the last win_blocks only."""
    return full_pages * blocks + win_pages * min(blocks, win_blocks)


@njit(cache=True, nogil=True)
def _window_fill_step(o, block, win_blocks):
    """The step at which a decoder of offset o takes its last capped block (win_blocks): where its
    cached tokens, step + o, reach (win_blocks - 1) x block."""
    return (win_blocks - 1) * block - o


@njit(cache=True, nogil=True)
def _forget_decoder(o, blocks, block, win_blocks, under, leave, dec_win):
    """A decoder of offset o holding `blocks` blocks stops decoding (finished or preempted): its
    capped blocks leave dec_win, and where they were still growing (fewer than win_blocks) it leaves
    `under` and its pending entry in `leave`. Returns dec_win."""
    if blocks < win_blocks:
        under[o % block] -= 1
        leave[_window_fill_step(o, block, win_blocks) % leave.size] -= 1
    return dec_win - min(blocks, win_blocks)


@njit(cache=True, nogil=True)
def _preempt_newest(s, now, block, shared, n, prompt, off, gen, held, decoding, epoch, last_emit, residue, n_preempt,
                    run_prev, run_next, pf_prev, pf_next, wq, pre_steps, n_pre, run_head, run_tail, n_running, pf_head,
                    pf_tail, n_dec, sum_off, dec_blocks, used, wq_head, wq_len, full_pages, win_pages, win_blocks,
                    under, leave, dec_win):
    """Preempt the newest running request (vLLM's running.pop(), recompute): its pages freed, back to
    the head of the waiting queue. A decoder counts as scheduled this step: it holds the block of the
    token it was to write, which is freed with the rest (its token is not emitted). Returns the
    request, whether it was decoding, and the updated state."""
    v = run_tail
    run_head, run_tail = _unlink(run_prev, run_next, v, run_head, run_tail)
    n_running -= 1
    was_decoding = decoding[v]
    if was_decoding:
        c = s + off[v]  # cached before this step's token
        blocks_v = -(-(c + 1) // block)
        gen[v] = c - (prompt[v] - shared) + 1
        decoding[v] = False
        n_dec -= 1
        sum_off -= off[v]
        residue[off[v] % block] -= 1
        dec_blocks -= blocks_v
        dec_win = _forget_decoder(off[v], blocks_v, block, win_blocks, under, leave, dec_win)
        epoch[v] += 1
        last_emit[v] = now
    else:  # prefilling: the blocks its chunks took so far
        blocks_v = held[v]
        pf_head, pf_tail = _unlink(pf_prev, pf_next, v, pf_head, pf_tail)
    used -= _pages(blocks_v, full_pages, win_pages, win_blocks)
    wq_head = (wq_head - 1) % n
    wq[wq_head] = v
    wq_len += 1
    n_preempt[v] += 1
    pre_steps = _grow(pre_steps, n_pre)
    pre_steps[n_pre] = s
    n_pre += 1
    return (v, was_decoding, pre_steps, n_pre, run_head, run_tail, n_running, pf_head, pf_tail, n_dec, sum_off,
            dec_blocks, used, wq_head, wq_len, dec_win)


@njit(cache=True, nogil=True)
def _capped_pairs(x, window):
    """planner.roofline.AttentionFlops' G: the (query, key) pairs of positions [0, x) of a layer
    that attends to the last `window` tokens."""
    if x <= window:
        return x * x * 0.5
    return window * x - window * window * 0.5


@njit(cache=True, nogil=True)
def run(arrival, prompt, output, block, total_pages, shared, max_seqs, chunk_budget,
        per_request, fixed_s, bw, fl, two_a, attn, attn_prefill, attn_capped, window, full_pages, win_pages,
        win_blocks, full_read_bytes, win_read_bytes, shared_bytes, comm_per_token,
        rec_start, rec_dt, rec_run, rec_dec, rec_used, rec_pf, rec_pf_s, rec_wait):
    """Replay the requests; returns per-request records, the steps run, and the rarer per-event
    records (see planner.sim_measures.Trace). The per-step records are written into the rec_*
    arrays, as many steps as they hold: the run is the same whatever their size, and a caller
    whose arrays were shorter than the steps returned runs it again with longer ones."""
    n = arrival.size
    gen = np.zeros(n, np.int64)  # tokens generated so far
    off = np.zeros(n, np.int64)  # decoding: cached tokens (beyond the shared prefix) = step + off
    held = np.zeros(n, np.int64)  # prefilling: blocks allocated so far (those its scheduled chunks fill)
    pf_pos = np.zeros(n, np.int64)  # prefilling: tokens of its (re)prefill computed so far
    pf_len = np.zeros(n, np.int64)  # prefilling: tokens to hold when done (prompt + generated)
    epoch = np.zeros(n, np.int64)  # invalidates heap entries of preempted sequences
    decoding = np.zeros(n, np.bool_)
    first_tok = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    last_emit = np.full(n, np.nan)
    n_preempt = np.zeros(n, np.int64)
    n_admit = np.zeros(n, np.int64)

    run_prev = np.full(n, _NONE, np.int64)
    run_next = np.full(n, _NONE, np.int64)
    run_head, run_tail, n_running = _NONE, _NONE, 0
    pf_prev = np.full(n, _NONE, np.int64)
    pf_next = np.full(n, _NONE, np.int64)
    pf_head, pf_tail = _NONE, _NONE
    wq = np.empty(n, np.int64)
    wq_head, wq_len = 0, 0
    cap = 1024
    hs = np.empty(cap, np.int64)
    hr = np.empty(cap, np.int64)
    he = np.empty(cap, np.int64)
    heap_size = 0
    residue = np.zeros(block, np.int64)
    completed = np.empty(n, np.int64)
    n_dec, sum_off, dec_blocks, used = 0, 0, 0, 0
    # Capped layers (sliding window, chunk): decoders whose capped blocks still grow (fewer than
    # win_blocks), counted by offset residue as `residue` counts every decoder, and in `leave` the
    # step at which each takes its last one (blocks = win_blocks), by step modulo its size: every
    # pending step lies within win_blocks * block steps ahead. dec_win: the decoders' capped blocks.
    under = np.zeros(block, np.int64)
    leave = np.zeros(max(win_blocks * block, 1), np.int64)
    dec_win = 0

    recorded = rec_start.size
    pre_steps = np.empty(64, np.int64)
    n_pre = 0
    res_gaps = np.empty(64)
    res_steps = np.empty(64, np.int64)
    n_res = 0

    now = 0.0
    s = 0
    nxt = 0
    done = 0
    while done < n:
        while nxt < n and arrival[nxt] <= now:
            wq[(wq_head + wq_len) % n] = nxt
            wq_len += 1
            nxt += 1
        if n_running == 0 and wq_len == 0:
            now = arrival[nxt]
            continue

        # 1-2. Decode blocks, preempting the newest until they fit.
        r = (-s) % block
        need = residue[r]
        used += need * full_pages
        dec_blocks += need
        if win_pages:
            need_win = under[r]
            used += need_win * win_pages
            dec_win += need_win
            under[r] -= leave[s % leave.size]
            leave[s % leave.size] = 0
        preempted = False
        while used > total_pages:
            (v, _, pre_steps, n_pre, run_head, run_tail, n_running, pf_head, pf_tail, n_dec, sum_off, dec_blocks,
             used, wq_head, wq_len, dec_win) = _preempt_newest(
                s, now, block, shared, n, prompt, off, gen, held, decoding, epoch, last_emit, residue, n_preempt,
                run_prev, run_next, pf_prev, pf_next, wq, pre_steps, n_pre, run_head, run_tail, n_running, pf_head,
                pf_tail, n_dec, sum_off, dec_blocks, used, wq_head, wq_len, full_pages, win_pages, win_blocks,
                under, leave, dec_win)
            preempted = True
        budget = chunk_budget - n_dec

        # 3. Prefill chunks: running prefills first, each allocating the blocks its chunk fills and
        # preempting the newest running request while they do not fit (itself last), then FCFS
        # admissions, each needing the blocks of its first chunk.
        pf_tokens = 0
        pf_flops = 0.0
        n_completed = 0
        i = pf_head
        while i != _NONE and budget > 0:
            a = pf_pos[i]
            c = min(pf_len[i] - a, budget, per_request)
            b = a + c
            blocks_i = max(-(-(b - shared) // block), 0)
            extra = (_pages(blocks_i, full_pages, win_pages, win_blocks)
                     - _pages(held[i], full_pages, win_pages, win_blocks))
            stopped = False
            while extra > total_pages - used:
                (v, was_decoding, pre_steps, n_pre, run_head, run_tail, n_running, pf_head, pf_tail, n_dec, sum_off,
                 dec_blocks, used, wq_head, wq_len, dec_win) = _preempt_newest(
                    s, now, block, shared, n, prompt, off, gen, held, decoding, epoch, last_emit, residue, n_preempt,
                    run_prev, run_next, pf_prev, pf_next, wq, pre_steps, n_pre, run_head, run_tail, n_running, pf_head,
                    pf_tail, n_dec, sum_off, dec_blocks, used, wq_head, wq_len, full_pages, win_pages, win_blocks,
                    under, leave, dec_win)
                preempted = True
                if was_decoding:  # its slot's token of budget comes back
                    budget += 1
                if v == i:
                    stopped = True
                    break
            if stopped:
                break
            used += extra
            held[i] = blocks_i
            pf_flops += two_a * c + attn_prefill * (b * b - a * a) * 0.5
            if attn_capped:
                pf_flops += attn_capped * (_capped_pairs(b, window) - _capped_pairs(a, window))
            pf_pos[i] = b
            budget -= c
            pf_tokens += c
            if b == pf_len[i]:
                completed[n_completed] = i
                n_completed += 1
            i = pf_next[i]
        if not preempted:
            while wq_len > 0 and budget > 0 and n_running < max_seqs:
                h = wq[wq_head]
                length = prompt[h] + gen[h]
                a = min(shared, length - 1)  # a full prefix hit still computes the last token
                c = min(length - a, budget, per_request)
                b = a + c
                req = max(-(-(b - shared) // block), 0)
                req_pages = _pages(req, full_pages, win_pages, win_blocks)
                if req_pages > total_pages - used:
                    break
                wq_head = (wq_head + 1) % n
                wq_len -= 1
                run_head, run_tail = _append(run_prev, run_next, h, run_head, run_tail)
                n_running += 1
                pf_head, pf_tail = _append(pf_prev, pf_next, h, pf_head, pf_tail)
                n_admit[h] += 1
                used += req_pages
                held[h] = req
                pf_len[h] = length
                pf_flops += two_a * c + attn_prefill * (b * b - a * a) * 0.5
                if attn_capped:
                    pf_flops += attn_capped * (_capped_pairs(b, window) - _capped_pairs(a, window))
                pf_pos[h] = b
                budget -= c
                pf_tokens += c
                if b == length:
                    completed[n_completed] = h
                    n_completed += 1

        # Step time: decode part + prefill part (planner.simulate's module docstring).
        cache_bytes = dec_blocks * full_read_bytes + dec_win * win_read_bytes + n_dec * shared_bytes
        ctx = n_dec * (s + 1 + shared) + sum_off
        t_mem = cache_bytes / bw
        t_flop = (attn * ctx + attn_capped * min(ctx, n_dec * window)) / fl
        dt = fixed_s[n_dec] + (t_mem if t_mem > t_flop else t_flop)
        pf_s = 0.0
        if pf_tokens:
            pf_s = pf_flops / fl + comm_per_token * pf_tokens
            dt += pf_s
        end = now + dt
        if s < recorded:
            rec_start[s], rec_dt[s], rec_run[s], rec_dec[s] = now, dt, n_running, n_dec
            rec_used[s], rec_pf[s], rec_pf_s[s], rec_wait[s] = used, pf_tokens, pf_s, wq_len

        # 4. Tokens out: decoders that finish this step, then prefills that completed.
        while heap_size > 0 and hs[0] == s:
            i, ep = hr[0], he[0]
            heap_size = _heap_pop(hs, hr, he, heap_size)
            if ep != epoch[i] or not decoding[i]:
                continue
            c = s + off[i] + 1
            blocks_i = -(-c // block)
            decoding[i] = False
            n_dec -= 1
            sum_off -= off[i]
            residue[off[i] % block] -= 1
            dec_blocks -= blocks_i
            dec_win = _forget_decoder(off[i], blocks_i, block, win_blocks, under, leave, dec_win)
            used -= _pages(blocks_i, full_pages, win_pages, win_blocks)
            run_head, run_tail = _unlink(run_prev, run_next, i, run_head, run_tail)
            n_running -= 1
            gen[i] = output[i]
            finish[i] = end
            done += 1
        for k in range(n_completed):
            i = completed[k]
            pf_head, pf_tail = _unlink(pf_prev, pf_next, i, pf_head, pf_tail)
            if gen[i] == 0:
                first_tok[i] = end
            else:
                res_gaps = _grow(res_gaps, n_res)
                res_steps = _grow(res_steps, n_res)
                res_gaps[n_res] = end - last_emit[i]
                res_steps[n_res] = s
                n_res += 1
            gen[i] += 1
            if gen[i] >= output[i]:
                used -= _pages(held[i], full_pages, win_pages, win_blocks)
                run_head, run_tail = _unlink(run_prev, run_next, i, run_head, run_tail)
                n_running -= 1
                finish[i] = end
                done += 1
                continue
            decoding[i] = True
            o_i = pf_len[i] - shared - (s + 1)
            off[i] = o_i
            n_dec += 1
            sum_off += o_i
            residue[o_i % block] += 1
            dec_blocks += held[i]
            dec_win += min(held[i], win_blocks)
            if held[i] < win_blocks:  # its capped blocks grow until its window fills
                under[o_i % block] += 1
                leave[_window_fill_step(o_i, block, win_blocks) % leave.size] += 1
            if heap_size == hs.size:
                hs = _grow(hs, heap_size)
                hr = _grow(hr, heap_size)
                he = _grow(he, heap_size)
            heap_size = _heap_push(hs, hr, he, heap_size, s + output[i] - gen[i], i, epoch[i])
        now = end
        s += 1
    return (first_tok, finish, n_preempt, n_admit, s, pre_steps[:n_pre], res_gaps[:n_res],
            res_steps[:n_res], total_pages - used)
