//! post_map (SPEC section 3) and expand.

use half::bf16;
use rayon::prelude::*;

/// `r'[j][h] = bf16(post[j] * x[h] + sum_i comb[i][j] * r[i][h])`, accumulated in f32 in the
/// order written (the post term first, then streams i = 0..n, each a fused multiply-add), rounded
/// once.
///
/// Shapes: x `[T,H]`, residual `[T,n,H]`, post `[T,n]`, comb `[T,n,n]`, out `[T,n,H]`.
pub fn post_map(
    n: usize,
    h: usize,
    x: &[bf16],
    residual: &[bf16],
    post: &[f32],
    comb: &[f32],
    out: &mut [bf16],
) {
    if h == 0 || n == 0 {
        return;
    }
    out.par_chunks_mut(n * h)
        .zip(residual.par_chunks(n * h))
        .zip(x.par_chunks(h))
        .zip(post.par_chunks(n).zip(comb.par_chunks(n * n)))
        .for_each(|(((o, r), x), (p, c))| post_map_token(n, h, x, r, p, c, o));
}

with_fma! {
    /// One token of [`post_map`].
    pub fn post_map_token, post_map_token_fma(
        n: usize,
        h: usize,
        x: &[bf16],
        r: &[bf16],
        post: &[f32],
        comb: &[f32],
        out: &mut [bf16],
    ) {
        for j in 0..n {
            let o = &mut out[j * h..(j + 1) * h];
            for (hh, oh) in o.iter_mut().enumerate() {
                let mut acc = post[j] * x[hh].to_f32();
                for i in 0..n {
                    acc = comb[i * n + j].mul_add(r[i * h + hh].to_f32(), acc);
                }
                *oh = bf16::from_f32(acc);
            }
        }
    }
}

/// Broadcasts x `[T,H]` to every stream of a residual `[T,n,H]`.
pub fn expand(n: usize, h: usize, x: &[bf16], out: &mut [bf16]) {
    if h == 0 || n == 0 {
        return;
    }
    out.par_chunks_mut(n * h)
        .zip(x.par_chunks(h))
        .for_each(|(o, x)| {
            for s in o.chunks_mut(h) {
                s.copy_from_slice(x);
            }
        });
}
