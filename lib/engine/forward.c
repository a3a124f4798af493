/* The forward pass of every family: embeddings, per layer attention (GQA
 * with QK norms / sinks / sliding windows, or MLA) and the feed-forward block
 * (dense MLP or routed experts + shared experts), final norm, lm_head.
 *
 * One call runs T tokens at positions n_past..n_past+T-1; their keys and
 * values are appended to the cache first, so prefill chunks and single decode
 * steps take the same path. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/threadpool.h"
#include "engine_internal.h"

/* Scratch from the context's arena (released per block, see scratch.c). */
#define SCRATCH(n, size) kt__scratch_alloc(&ctx->scratch, (n), (size))

/* The tokens [t0, t0 + n) of a call that belong to one context's sequence,
 * at positions pos0..pos0+n-1 of that context's KV cache. */
typedef struct fwd_group {
    kt_context *c;
    int32_t t0, n, pos0;
} fwd_group;

/* Scratch buffers of one forward call. ctx runs everything but attention
 * (its weights, MoE backend, workers and scratch); attention runs per group. */
typedef struct fwd {
    kt_context *ctx;
    const kt__hparams *hp;
    int32_t T;
    const fwd_group *g;
    int32_t n_g;
    float *x;      /* [T][H] residual stream           */
    float *xn;     /* [T][H] normed input of a block   */
    float *out;    /* [T][H] block output              */
    float *cosv;   /* [T][rope_dim/2]                  */
    float *sinv;   /* [T][rope_dim/2]                  */
} fwd;

/* ----------------------------------------------------------------- cache --- */

static void cache_store(const kt_context *ctx, void *base, int32_t row, int32_t pos,
                        const float *src)
{
    if (ctx->kv_type == KT_TYPE_F32) {
        memcpy((float *)base + (size_t)pos * row, src, sizeof(float) * row);
    } else {
        uint16_t *d = (uint16_t *)base + (size_t)pos * row;
        for (int32_t i = 0; i < row; i++)
            d[i] = kt__f32_to_bf16(src[i]);
    }
}

/* Positions [0, n) of a cache as F32: the cache itself, or a widened copy in buf. */
static const float *cache_f32(const kt_context *ctx, const void *base, int32_t row, int32_t n,
                              float *buf)
{
    if (ctx->kv_type == KT_TYPE_F32)
        return base;
    const uint16_t *s = base;
    for (size_t i = 0; i < (size_t)n * row; i++)
        buf[i] = kt__bf16_to_f32(s[i]);
    return buf;
}

/* ------------------------------------------------------------------ rope --- */

static void rope_tables(fwd *f)
{
    const kt__hparams *hp = f->hp;
    int32_t half = hp->rope_dim / 2;
    for (int32_t gi = 0; gi < f->n_g; gi++) {
        const fwd_group *g = &f->g[gi];
        for (int32_t t = g->t0; t < g->t0 + g->n; t++)
            for (int32_t i = 0; i < half; i++) {
                /* angle in f32 as the reference computes it: pos * inv_freq */
                float ang = (float)(g->pos0 + t - g->t0) * hp->inv_freq[i];
                f->cosv[(size_t)t * half + i] = cosf(ang) * hp->rope_attn_factor;
                f->sinv[(size_t)t * half + i] = sinf(ang) * hp->rope_attn_factor;
            }
    }
}

/* Rotates the first rope_dim values of one head vector: NeoX halves (i, i+d/2)
 * or interleaved pairs (2i, 2i+1). */
static void rope_apply(const kt__hparams *hp, float *v, const float *c, const float *s)
{
    int32_t half = hp->rope_dim / 2;
    if (hp->rope_interleave) {
        for (int32_t i = 0; i < half; i++) {
            float a = v[2 * i], b = v[2 * i + 1];
            v[2 * i] = a * c[i] - b * s[i];
            v[2 * i + 1] = b * c[i] + a * s[i];
        }
    } else {
        for (int32_t i = 0; i < half; i++) {
            float a = v[i], b = v[i + half];
            v[i] = a * c[i] - b * s[i];
            v[i + half] = b * c[i] + a * s[i];
        }
    }
}

/* softmax over s[0..n) with an optional sink logit that takes part in the
 * normalisation but has no value row; returns nothing, s holds probabilities. */
static void softmax_sink(float *s, int32_t n, const float *sink)
{
    float mx = sink ? *sink : -INFINITY;
    for (int32_t j = 0; j < n; j++)
        mx = s[j] > mx ? s[j] : mx;
    float sum = sink ? expf(*sink - mx) : 0.0f;
    for (int32_t j = 0; j < n; j++) {
        s[j] = expf(s[j] - mx);
        sum += s[j];
    }
    float inv = 1.0f / sum;
    for (int32_t j = 0; j < n; j++)
        s[j] *= inv;
}

/* ------------------------------------------------------------ attention --- */

/* Attention of one head over all T tokens of the call is independent of the
 * other heads: heads are split over the workers, each with its own scratch
 * (ws_floats values: scores and, for absorbed MLA, the latent q̃ and õ). */
typedef struct heads_job heads_job;
struct heads_job {
    void (*fn)(const heads_job *j, int32_t h, float *ws);
    const fwd *f;
    int32_t T, pos0;      /* one group's tokens and first position */
    int32_t l, n_workers;
    size_t ws_floats;
    float *ws;            /* [n_workers][ws_floats] */
    const float *q;       /* [T][nh][qk] of the group */
    const float *K, *V;   /* GQA [P][kvdim]         */
    const float *C;       /* MLA [P][R + rope]      */
    const float *kvb;     /* MLA naive [P][nh][nope + v] */
    bool absorbed;
    float *o;             /* [T][nh][v] of the group  */
};

static void heads_worker(void *arg, int tid)
{
    const heads_job *j = arg;
    int32_t nh = j->f->hp->n_head;
    int32_t per = (nh + j->n_workers - 1) / j->n_workers;
    for (int32_t h = tid * per; h < nh && h < (tid + 1) * per; h++)
        j->fn(j, h, j->ws + (size_t)tid * j->ws_floats);
}

static kt_status run_heads(kt_context *ctx, heads_job *j)
{
    int32_t nh = ctx->hp.n_head;
    /* (query, key, head) triples; below ~64K the workers cost more than they save */
    bool par = ctx->pool && nh > 1 && (int64_t)j->T * (j->pos0 + j->T) * nh >= 65536;
    j->n_workers = par ? kt__pool_n_threads(ctx->pool) : 1;
    j->ws = SCRATCH((size_t)j->n_workers * j->ws_floats, sizeof(float));
    if (!j->ws)
        return KT_ERR_NOMEM;
    if (par) {
        kt__pool_run(ctx->pool, heads_worker, j);
    } else {
        for (int32_t h = 0; h < nh; h++)
            j->fn(j, h, j->ws);
    }
    return KT_OK;
}

/* GQA, one head: o[t][h] = Σ_j softmax(scale · q·k_j (+ sink))_j v_j over the
 * visible (causal, windowed) positions. */
static void gqa_head(const heads_job *j, int32_t h, float *sc)
{
    const fwd *f = j->f;
    const kt__hparams *hp = f->hp;
    const kt__layer *L = &f->ctx->w.layers[j->l];
    int32_t nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim;
    int32_t qdim = nh * hd, kvdim = nkv * hd, kvh = h / (nh / nkv);
    int32_t window = hp->layer_sliding[j->l] ? hp->sliding_window : 0;
    for (int32_t t = 0; t < j->T; t++) {
        int32_t pos = j->pos0 + t;
        int32_t lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
        int32_t n = pos + 1 - lo;
        const float *qh = j->q + (size_t)t * qdim + (size_t)h * hd;
        /* s_j = scale · q·k_j */
        for (int32_t i = 0; i < n; i++)
            sc[i] = kt__dot(qh, j->K + (size_t)(lo + i) * kvdim + (size_t)kvh * hd, hd) *
                    hp->attn_scale;
        softmax_sink(sc, n, L->sinks ? &L->sinks[h] : NULL);
        /* o_h = Σ_j p_j v_j */
        float *oh = j->o + (size_t)t * qdim + (size_t)h * hd;
        memset(oh, 0, sizeof(float) * hd);
        for (int32_t i = 0; i < n; i++)
            kt__axpy(oh, sc[i], j->V + (size_t)(lo + i) * kvdim + (size_t)kvh * hd, hd);
    }
}

/* MLA, one head, naive (k_nope, v expanded in kvb) or absorbed (latent space). */
static void mla_head(const heads_job *j, int32_t h, float *ws)
{
    const fwd *f = j->f;
    const kt__hparams *hp = f->hp;
    const kt__layer *L = &f->ctx->w.layers[j->l];
    int32_t nh = hp->n_head, nope = hp->qk_nope, rd = hp->qk_rope, vd = hp->v_head;
    int32_t R = hp->kv_lora_rank, qk = nope + rd, row = R + rd, kvb_rows = nope + vd;
    int32_t P = j->pos0 + j->T;
    float *sc = ws, *qt_abs = ws + P, *ot_abs = ws + P + R, *wrow = ws + P + 2 * (size_t)R;
    int32_t r0 = h * kvb_rows; /* this head's rows of kv_b: [nope + v][R] */
    for (int32_t t = 0; t < j->T; t++) {
        int32_t n = j->pos0 + t + 1;
        const float *qh = j->q + ((size_t)t * nh + h) * qk, *qr = qh + nope;
        float *oh = j->o + ((size_t)t * nh + h) * vd;
        if (!j->absorbed) {
            for (int32_t i = 0; i < n; i++) {
                const float *kn = j->kvb + ((size_t)i * nh + h) * kvb_rows;
                sc[i] = (kt__dot(qh, kn, nope) + kt__dot(qr, j->C + (size_t)i * row + R, rd)) *
                        hp->attn_scale;
            }
            softmax_sink(sc, n, NULL);
            memset(oh, 0, sizeof(float) * vd);
            for (int32_t i = 0; i < n; i++)
                kt__axpy(oh, sc[i], j->kvb + ((size_t)i * nh + h) * kvb_rows + nope, vd);
            continue;
        }
        /* q̃ = W_ukᵀ q_nope   [R]  (kv_b rows widened one at a time) */
        memset(qt_abs, 0, sizeof(float) * R);
        for (int32_t d = 0; d < nope; d++) {
            kt__mat_row_f32(&L->wkv_b, r0 + d, wrow);
            kt__axpy(qt_abs, qh[d], wrow, R);
        }
        /* s_j = scale · (q̃·c_kv_j + q_rope·k_rope_j) */
        for (int32_t i = 0; i < n; i++) {
            const float *ci = j->C + (size_t)i * row;
            sc[i] = (kt__dot(qt_abs, ci, R) + kt__dot(qr, ci + R, rd)) * hp->attn_scale;
        }
        softmax_sink(sc, n, NULL);
        /* õ = Σ p_j c_kv_j ; o_h = W_uv õ */
        memset(ot_abs, 0, sizeof(float) * R);
        for (int32_t i = 0; i < n; i++)
            kt__axpy(ot_abs, sc[i], j->C + (size_t)i * row, R);
        for (int32_t e = 0; e < vd; e++) {
            kt__mat_row_f32(&L->wkv_b, r0 + nope + e, wrow);
            oh[e] = kt__dot(wrow, ot_abs, R);
        }
    }
}

static kt_status attn_gqa(fwd *f, int32_t l)
{
    kt_context *ctx = f->ctx;
    const kt__hparams *hp = f->hp;
    const kt__layer *L = &ctx->w.layers[l];
    int32_t T = f->T, nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim;
    int32_t qdim = nh * hd, kvdim = nkv * hd, half = hp->rope_dim / 2;
    kt_status st = KT_OK;
    kt__scratch_mark mark = kt__scratch_get_mark(&ctx->scratch);

    float *q = SCRATCH((size_t)T * qdim, sizeof(float));
    float *k = SCRATCH((size_t)T * kvdim, sizeof(float));
    float *v = SCRATCH((size_t)T * kvdim, sizeof(float));
    float *o = SCRATCH((size_t)T * qdim, sizeof(float));
    if (!q || !k || !v || !o) {
        st = KT_ERR_NOMEM;
        goto done;
    }

    /* q[T][nh*hd] = xn Wqᵀ + bq ; k, v [T][nkv*hd] likewise */
    kt__linear_par(ctx, f->xn, T, &L->wq, L->bq, q);
    kt__linear_par(ctx, f->xn, T, &L->wk, L->bk, k);
    kt__linear_par(ctx, f->xn, T, &L->wv, L->bv, v);

    for (int32_t gi = 0; gi < f->n_g; gi++) {
        const fwd_group *g = &f->g[gi];
        for (int32_t t = g->t0; t < g->t0 + g->n; t++) {
            float *qt = q + (size_t)t * qdim, *kt = k + (size_t)t * kvdim;
            if (hp->qk_norm == KT__QK_NORM_FULL) {
                kt__rmsnorm(qt, qdim, L->q_norm, hp->rms_eps);
                kt__rmsnorm(kt, kvdim, L->k_norm, hp->rms_eps);
            } else if (hp->qk_norm == KT__QK_NORM_HEAD) {
                for (int32_t h = 0; h < nh; h++)
                    kt__rmsnorm(qt + (size_t)h * hd, hd, L->q_norm, hp->rms_eps);
                for (int32_t h = 0; h < nkv; h++)
                    kt__rmsnorm(kt + (size_t)h * hd, hd, L->k_norm, hp->rms_eps);
            }
            const float *c = f->cosv + (size_t)t * half, *s = f->sinv + (size_t)t * half;
            if (half > 0) {
                for (int32_t h = 0; h < nh; h++)
                    rope_apply(hp, qt + (size_t)h * hd, c, s);
                for (int32_t h = 0; h < nkv; h++)
                    rope_apply(hp, kt + (size_t)h * hd, c, s);
            }
            int32_t pos = g->pos0 + t - g->t0;
            cache_store(g->c, g->c->k_cache[l], kvdim, pos, kt);
            cache_store(g->c, g->c->v_cache[l], kvdim, pos, v + (size_t)t * kvdim);
        }
    }
    /* attention: each group over its own context's cache */
    for (int32_t gi = 0; gi < f->n_g && st == KT_OK; gi++) {
        const fwd_group *g = &f->g[gi];
        int32_t P = g->pos0 + g->n;
        kt__scratch_mark gm = kt__scratch_get_mark(&ctx->scratch);
        bool f32 = g->c->kv_type == KT_TYPE_F32;
        float *kbuf = f32 ? NULL : SCRATCH((size_t)P * kvdim, sizeof(float));
        float *vbuf = f32 ? NULL : SCRATCH((size_t)P * kvdim, sizeof(float));
        if (!f32 && (!kbuf || !vbuf)) {
            st = KT_ERR_NOMEM;
            break;
        }
        const float *K = cache_f32(g->c, g->c->k_cache[l], kvdim, P, kbuf);
        const float *V = cache_f32(g->c, g->c->v_cache[l], kvdim, P, vbuf);
        heads_job hj = {gqa_head, f, g->n, g->pos0, l, 0, (size_t)P, NULL,
                        q + (size_t)g->t0 * qdim, K, V, NULL, NULL, false,
                        o + (size_t)g->t0 * qdim};
        st = run_heads(ctx, &hj);
        kt__scratch_release(&ctx->scratch, gm);
    }
    if (st < 0)
        goto done;
    kt__linear_par(ctx, o, T, &L->wo, L->bo, f->out);
done:
    kt__scratch_release(&ctx->scratch, mark);
    return st;
}

/* MLA. Cache row per position: c_kv [kv_lora] (normed) ⊕ k_rope [rope] (rotated).
 * naive: expand k_nope and v for every cached position through kv_b (prefill);
 * absorbed: fold kv_b into the query and the output (decode). */
static kt_status attn_mla(fwd *f, int32_t l)
{
    kt_context *ctx = f->ctx;
    const kt__hparams *hp = f->hp;
    const kt__layer *L = &ctx->w.layers[l];
    int32_t T = f->T, nh = hp->n_head, half = hp->rope_dim / 2;
    int32_t nope = hp->qk_nope, rd = hp->qk_rope, vd = hp->v_head, R = hp->kv_lora_rank;
    int32_t qk = nope + rd, row = R + rd, kvb_rows = nope + vd;
    kt_status st = KT_OK;
    kt__scratch_mark mark = kt__scratch_get_mark(&ctx->scratch);

    float *cq = NULL;
    float *q = SCRATCH((size_t)T * nh * qk, sizeof(float));
    float *kva = SCRATCH((size_t)T * row, sizeof(float));
    float *o = SCRATCH((size_t)T * nh * vd, sizeof(float));
    if (!q || !kva || !o) {
        st = KT_ERR_NOMEM;
        goto done;
    }

    /* q = W_qb · RMSNorm(W_qa · x)   (or W_q · x)      [T][nh][nope + rope] */
    if (hp->q_lora_rank > 0) {
        cq = SCRATCH((size_t)T * hp->q_lora_rank, sizeof(float));
        if (!cq) {
            st = KT_ERR_NOMEM;
            goto done;
        }
        kt__linear_par(ctx, f->xn, T, &L->wq_a, NULL, cq);
        for (int32_t t = 0; t < T; t++)
            kt__rmsnorm(cq + (size_t)t * hp->q_lora_rank, hp->q_lora_rank, L->q_a_norm,
                        hp->rms_eps);
        kt__linear_par(ctx, cq, T, &L->wq_b, NULL, q);
    } else {
        kt__linear_par(ctx, f->xn, T, &L->wq, NULL, q);
    }
    /* [c_kv | k_rope] = W_kva · x ; c_kv normed, k_rope rotated (one head) */
    kt__linear_par(ctx, f->xn, T, &L->wkv_a, NULL, kva);
    for (int32_t gi = 0; gi < f->n_g; gi++) {
        const fwd_group *g = &f->g[gi];
        for (int32_t t = g->t0; t < g->t0 + g->n; t++) {
            float *r = kva + (size_t)t * row;
            const float *c = f->cosv + (size_t)t * half, *s = f->sinv + (size_t)t * half;
            kt__rmsnorm(r, R, L->kv_a_norm, hp->rms_eps);
            rope_apply(hp, r + R, c, s);
            for (int32_t h = 0; h < nh; h++)
                rope_apply(hp, q + ((size_t)t * nh + h) * qk + nope, c, s);
            cache_store(g->c, g->c->k_cache[l], row, g->pos0 + t - g->t0, r);
        }
    }
    /* attention: each group over its own context's latent cache */
    for (int32_t gi = 0; gi < f->n_g && st == KT_OK; gi++) {
        const fwd_group *g = &f->g[gi];
        int32_t P = g->pos0 + g->n;
        bool absorbed = ctx->mla_mode == 2 || (ctx->mla_mode == 0 && g->n == 1);
        kt__scratch_mark gm = kt__scratch_get_mark(&ctx->scratch);
        float *cbuf = g->c->kv_type == KT_TYPE_F32 ? NULL
                                                   : SCRATCH((size_t)P * row, sizeof(float));
        if (g->c->kv_type != KT_TYPE_F32 && !cbuf) {
            st = KT_ERR_NOMEM;
            break;
        }
        const float *C = cache_f32(g->c, g->c->k_cache[l], row, P, cbuf);
        float *kvb = NULL;
        if (!absorbed) {
            /* kvb[P][nh][nope + v] = c_kv · W_kvbᵀ */
            kvb = SCRATCH((size_t)P * nh * kvb_rows, sizeof(float));
            float *ckv = SCRATCH((size_t)P * R, sizeof(float));
            if (!kvb || !ckv) {
                st = KT_ERR_NOMEM;
                break;
            }
            for (int32_t j = 0; j < P; j++)
                memcpy(ckv + (size_t)j * R, C + (size_t)j * row, sizeof(float) * R);
            kt__linear_par(ctx, ckv, P, &L->wkv_b, NULL, kvb);
        }
        heads_job hj = {mla_head, f, g->n, g->pos0, l, 0, (size_t)P + 3 * (size_t)R, NULL,
                        q + (size_t)g->t0 * nh * qk, NULL, NULL, C, kvb, absorbed,
                        o + (size_t)g->t0 * nh * vd};
        st = run_heads(ctx, &hj);
        kt__scratch_release(&ctx->scratch, gm);
    }
    if (st < 0)
        goto done;
    kt__linear_par(ctx, o, T, &L->wo, NULL, f->out);
done:
    kt__scratch_release(&ctx->scratch, mark);
    return st;
}

/* ---------------------------------------------------------- feed-forward --- */

/* out[T][H] = down(act(gate x + bg, up x + bu)) + bd for T rows of x. */
static kt_status ffn(kt_context *ctx, const float *x, int32_t T, const kt__mat *gate,
                     const kt__mat *up, const kt__mat *down, const float *bg, const float *bu,
                     const float *bd, bool oai, float *out)
{
    const kt__hparams *hp = &ctx->hp;
    int32_t I = gate->rows;
    kt__scratch_mark mark = kt__scratch_get_mark(&ctx->scratch);
    float *g = SCRATCH((size_t)T * I, sizeof(float));
    float *u = SCRATCH((size_t)T * I, sizeof(float));
    if (!g || !u) {
        kt__scratch_release(&ctx->scratch, mark);
        return KT_ERR_NOMEM;
    }
    kt__linear_par(ctx, x, T, gate, bg, g);
    kt__linear_par(ctx, x, T, up, bu, u);
    for (size_t i = 0; i < (size_t)T * I; i++) {
        if (oai) {
            /* g = min(g, limit); u = clamp(u, ±limit); a = (u + 1) · g · σ(alpha g) */
            float gv = g[i] < hp->act_limit ? g[i] : hp->act_limit;
            float uv = u[i] < -hp->act_limit ? -hp->act_limit
                       : u[i] > hp->act_limit ? hp->act_limit
                                              : u[i];
            g[i] = (uv + 1.0f) * gv / (1.0f + expf(-hp->act_alpha * gv));
        } else {
            g[i] = kt__silu(g[i]) * u[i];
        }
    }
    kt__linear_par(ctx, g, T, down, bd, out);
    kt__scratch_release(&ctx->scratch, mark);
    return KT_OK;
}

/* Router: logits [E] -> ids [k], weights [k] (best first, lower index on ties). */
static void route(const kt__hparams *hp, const kt__layer *L, float *logit, int32_t *ids,
                  float *wts, float *tmp /* [2E] */)
{
    int32_t E = hp->n_expert, k = hp->n_expert_used;
    float *sel = tmp, *score = tmp + E;
    switch (hp->router) {
    case KT__ROUTER_SOFTMAX_TOPK:
        memcpy(score, logit, sizeof(float) * E);
        kt__softmax(score, E);
        memcpy(sel, score, sizeof(float) * E);
        break;
    case KT__ROUTER_SIGMOID_BIAS:
        for (int32_t e = 0; e < E; e++) {
            score[e] = 1.0f / (1.0f + expf(-logit[e]));
            sel[e] = score[e] + (L->e_bias ? L->e_bias[e] : 0.0f);
        }
        if (hp->n_group > 1 && hp->topk_group < hp->n_group) {
            /* group score = sum of its top-2; keep topk_group groups, zero the rest */
            int32_t gs = E / hp->n_group;
            float gscore[64]; /* n_group <= 64 (checked at load) */
            bool keep[64] = {false};
            int32_t ng = hp->n_group;
            for (int32_t g = 0; g < ng; g++) {
                float a = -INFINITY, b = -INFINITY;
                for (int32_t i = 0; i < gs; i++) {
                    float v = sel[g * gs + i];
                    if (v > a) {
                        b = a;
                        a = v;
                    } else if (v > b) {
                        b = v;
                    }
                }
                gscore[g] = a + (gs > 1 ? b : 0.0f);
            }
            for (int32_t r = 0; r < hp->topk_group; r++) {
                int32_t best = -1;
                for (int32_t g = 0; g < ng; g++)
                    if (!keep[g] && (best < 0 || gscore[g] > gscore[best]))
                        best = g;
                keep[best] = true;
            }
            for (int32_t g = 0; g < ng; g++)
                if (!keep[g])
                    for (int32_t i = 0; i < gs; i++)
                        sel[g * gs + i] = 0.0f;
        }
        break;
    case KT__ROUTER_TOPK_SOFTMAX:
        for (int32_t e = 0; e < E; e++)
            sel[e] = score[e] = logit[e];
        break;
    }
    /* top-k of sel, best first */
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++) {
            bool taken = false;
            for (int32_t i = 0; i < j; i++)
                taken |= ids[i] == e;
            if (!taken && (best < 0 || sel[e] > sel[best]))
                best = e;
        }
        ids[j] = best;
        wts[j] = score[best];
    }
    if (hp->router == KT__ROUTER_TOPK_SOFTMAX) {
        kt__softmax(wts, k);
        return;
    }
    if (hp->norm_topk || hp->family == KT__FAM_MIXTRAL || hp->family == KT__FAM_MINIMAX_M2) {
        float sum = 0.0f;
        for (int32_t j = 0; j < k; j++)
            sum += wts[j];
        float den = hp->router == KT__ROUTER_SIGMOID_BIAS ? sum + 1e-20f : sum;
        for (int32_t j = 0; j < k; j++)
            wts[j] /= den;
    }
    for (int32_t j = 0; j < k; j++)
        wts[j] *= hp->routed_scale;
}

static kt_status moe_block(fwd *f, int32_t l)
{
    kt_context *ctx = f->ctx;
    const kt__hparams *hp = f->hp;
    const kt__layer *L = &ctx->w.layers[l];
    int32_t T = f->T, H = hp->n_embd, E = hp->n_expert, k = hp->n_expert_used;
    kt_status st = KT_OK;
    kt__scratch_mark mark = kt__scratch_get_mark(&ctx->scratch);
    float *logits = SCRATCH((size_t)T * E, sizeof(float));
    int32_t *ids = SCRATCH((size_t)T * k, sizeof(int32_t));
    float *wts = SCRATCH((size_t)T * k, sizeof(float));
    float *tmp = SCRATCH((size_t)2 * E, sizeof(float));
    float *xe = SCRATCH((size_t)T * H, sizeof(float));
    float *ye = SCRATCH((size_t)T * H, sizeof(float));
    int32_t *rows = SCRATCH((size_t)T, sizeof(int32_t));
    float *rw = SCRATCH((size_t)T, sizeof(float));
    if (!logits || !ids || !wts || !tmp || !xe || !ye || !rows || !rw) {
        st = KT_ERR_NOMEM;
        goto done;
    }
    /* router logits [T][E] in F32 */
    kt__linear_par_exact(ctx, f->xn, T, &L->router, L->router_b, logits);
    for (int32_t t = 0; t < T; t++)
        route(hp, L, logits + (size_t)t * E, ids + (size_t)t * k, wts + (size_t)t * k, tmp);
    if (ctx->route_stats || ctx->route_trace) {
        st = kt__route_observe(ctx, l, ids, T);
        if (st < 0)
            goto done;
    }

    memset(f->out, 0, sizeof(float) * T * H);
    if (ctx->moe && ctx->moe_shared_folded) {
        /* the shared expert rides along as expert E with weight 1 */
        int32_t k1 = k + 1;
        int32_t *ids1 = SCRATCH((size_t)T * k1, sizeof(int32_t));
        float *w1 = SCRATCH((size_t)T * k1, sizeof(float));
        if (!ids1 || !w1) {
            st = KT_ERR_NOMEM;
            goto done;
        }
        for (int32_t t = 0; t < T; t++) {
            memcpy(ids1 + (size_t)t * k1, ids + (size_t)t * k, sizeof(int32_t) * k);
            memcpy(w1 + (size_t)t * k1, wts + (size_t)t * k, sizeof(float) * k);
            ids1[(size_t)t * k1 + k] = E;
            w1[(size_t)t * k1 + k] = 1.0f;
        }
        st = kt__experts_forward(ctx, l, f->xn, T, ids1, w1, k1, f->out);
        if (st < 0)
            goto done;
    } else if (ctx->moe) {
        st = kt__experts_forward(ctx, l, f->xn, T, ids, wts, k, f->out);
        if (st < 0)
            goto done;
    }
    /* per expert: gather its tokens, run the FFN once, scatter w · y */
    for (int32_t e = 0; e < E && !ctx->moe; e++) {
        int32_t n = 0;
        for (int32_t t = 0; t < T; t++)
            for (int32_t j = 0; j < k; j++)
                if (ids[(size_t)t * k + j] == e) {
                    rows[n] = t;
                    rw[n] = wts[(size_t)t * k + j];
                    memcpy(xe + (size_t)n * H, f->xn + (size_t)t * H, sizeof(float) * H);
                    n++;
                }
        if (!n)
            continue;
        const kt__expert *x = &L->experts[e];
        st = ffn(ctx, xe, n, &x->gate, &x->up, &x->down, x->b_gate, x->b_up, x->b_down,
                 hp->gptoss_act, ye);
        if (st < 0)
            goto done;
        for (int32_t i = 0; i < n; i++) {
            float *o = f->out + (size_t)rows[i] * H;
            const float *y = ye + (size_t)i * H;
            for (int32_t c = 0; c < H; c++)
                o[c] += rw[i] * y[c];
        }
    }
    if (L->sh_gate.data && !(ctx->moe && ctx->moe_shared_folded)) {
        /* shared expert, unscaled (qwen2_moe: times sigmoid(w_g · x)) */
        st = ffn(ctx, f->xn, T, &L->sh_gate, &L->sh_up, &L->sh_down, NULL, NULL, NULL, false, ye);
        if (st < 0)
            goto done;
        float gate1 = 1.0f;
        for (int32_t t = 0; t < T; t++) {
            if (L->sh_gate_inp.data) {
                kt__linear_par(ctx, f->xn + (size_t)t * H, 1, &L->sh_gate_inp, NULL, &gate1);
                gate1 = 1.0f / (1.0f + expf(-gate1));
            }
            for (int32_t c = 0; c < H; c++)
                f->out[(size_t)t * H + c] += gate1 * ye[(size_t)t * H + c];
        }
    }
done:
    kt__scratch_release(&ctx->scratch, mark);
    return st;
}

/* ---------------------------------------------------------------- driver --- */

static void embed_row(const kt__mat *E, int32_t tok, float *dst)
{
    if (E->type == KT_TYPE_F32) {
        memcpy(dst, (const float *)E->data + (size_t)tok * E->cols, sizeof(float) * E->cols);
    } else {
        const uint16_t *r = (const uint16_t *)E->data + (size_t)tok * E->cols;
        for (int32_t i = 0; i < E->cols; i++)
            dst[i] = kt__bf16_to_f32(r[i]);
    }
}

/* One pass over T tokens split into groups (one per context); logits of every
 * token ([T][V]) or of each group's last token ([n_g][V]). */
static kt_status forward_groups(kt_context *ctx, const fwd_group *groups, int32_t n_g,
                                const int32_t *tokens, int32_t T, float *logits,
                                bool all_logits)
{
    const kt__hparams *hp = &ctx->hp;
    int32_t H = hp->n_embd, half = hp->rope_dim / 2;
    fwd f = {ctx, hp, T, groups, n_g, NULL, NULL, NULL, NULL, NULL};
    kt_status st = KT_OK;
    kt__scratch_reset(&ctx->scratch);
    f.x = SCRATCH((size_t)T * H, sizeof(float));
    f.xn = SCRATCH((size_t)T * H, sizeof(float));
    f.out = SCRATCH((size_t)T * H, sizeof(float));
    f.cosv = SCRATCH((size_t)T * half + 1, sizeof(float));
    f.sinv = SCRATCH((size_t)T * half + 1, sizeof(float));
    if (!f.x || !f.xn || !f.out || !f.cosv || !f.sinv) {
        st = KT_ERR_NOMEM;
        goto done;
    }
    rope_tables(&f);
    for (int32_t t = 0; t < T; t++)
        embed_row(&ctx->w.tok_embd, tokens[t], f.x + (size_t)t * H);
    /* test hook: [n_layer + 1][capture_total][H], this chunk at capture_off */
    float *cap = ctx->capture_hidden && n_g == 1
                     ? ctx->capture_hidden + (size_t)ctx->capture_off * H
                     : NULL;
    size_t cap_stride = (size_t)ctx->capture_total * H;
    if (cap)
        memcpy(cap, f.x, sizeof(float) * T * H);

    for (int32_t l = 0; l < hp->n_layer; l++) {
        const kt__layer *L = &ctx->w.layers[l];
        /* x += Attn(RMSNorm(x)) */
        for (int32_t t = 0; t < T; t++)
            kt__rmsnorm_to(f.x + (size_t)t * H, f.xn + (size_t)t * H, H, L->attn_norm,
                           hp->rms_eps);
        st = hp->mla ? attn_mla(&f, l) : attn_gqa(&f, l);
        if (st < 0)
            goto done;
        for (size_t i = 0; i < (size_t)T * H; i++)
            f.x[i] += f.out[i];
        /* x += FFN(RMSNorm(x)) */
        for (int32_t t = 0; t < T; t++)
            kt__rmsnorm_to(f.x + (size_t)t * H, f.xn + (size_t)t * H, H, L->ffn_norm,
                           hp->rms_eps);
        if (hp->layer_moe[l])
            st = moe_block(&f, l);
        else
            st = ffn(ctx, f.xn, T, &L->ffn_gate, &L->ffn_up, &L->ffn_down, NULL, NULL, NULL,
                     hp->gptoss_act, f.out);
        if (st < 0)
            goto done;
        for (size_t i = 0; i < (size_t)T * H; i++)
            f.x[i] += f.out[i];
        if (cap && l + 1 < hp->n_layer)
            memcpy(cap + (size_t)(l + 1) * cap_stride, f.x, sizeof(float) * T * H);
    }
    for (int32_t t = 0; t < T; t++)
        kt__rmsnorm_to(f.x + (size_t)t * H, f.xn + (size_t)t * H, H, ctx->w.out_norm,
                       hp->rms_eps);
    if (cap)
        memcpy(cap + (size_t)hp->n_layer * cap_stride, f.xn, sizeof(float) * T * H);
    if (logits && all_logits) {
        kt__linear_par(ctx, f.xn, T, &ctx->w.lm_head, NULL, logits);
    } else if (logits) {
        /* the last token of each group: [n_g][H] -> [n_g][V] */
        float *last = f.out; /* free now; T >= n_g rows */
        for (int32_t gi = 0; gi < n_g; gi++)
            memcpy(last + (size_t)gi * H,
                   f.xn + (size_t)(groups[gi].t0 + groups[gi].n - 1) * H, sizeof(float) * H);
        kt__linear_par(ctx, last, n_g, &ctx->w.lm_head, NULL, logits);
    }
done:
    kt__scratch_reset(&ctx->scratch);
    return st;
}

kt_status kt__forward(kt_context *ctx, const int32_t *tokens, int32_t T, float *logits,
                      bool all_logits)
{
    if (ctx->gpu)
        return kt__gpu_forward(ctx, tokens, T, logits, all_logits);
    fwd_group g = {ctx, 0, T, ctx->n_past};
    return forward_groups(ctx, &g, 1, tokens, T, logits, all_logits);
}

kt_status kt__forward_multi(kt_context *const *ctxs, int32_t n, const int32_t *tokens,
                            const int32_t *n_tokens, float *logits)
{
    kt_context *ctx = ctxs[0];
    fwd_group *g = kt__malloc_array((size_t)n, sizeof *g);
    if (!g)
        return KT_ERR_NOMEM;
    int32_t T = 0;
    for (int32_t i = 0; i < n; i++) {
        g[i] = (fwd_group){ctxs[i], T, n_tokens[i], ctxs[i]->n_past};
        T += n_tokens[i];
    }
    kt_status st = forward_groups(ctx, g, n, tokens, T, logits, false);
    kt__free(g);
    return st;
}
