//! The MXFP8 layer input (SPEC section 6): blocks of 32 elements along H share one power-of-two
//! scale (E8M0 byte), values are E4M3 (round to nearest even, saturating to +-448).
//!
//! What is quantized is the last f32 value of each element before its bf16 rounding (the
//! normalized value when the op applies the RMSNorm, the collapse sum otherwise): quantizing the
//! bf16 value instead would round twice.

use float8::F8E4M3;

/// Elements per scale block.
pub const BLOCK: usize = 32;
/// Largest finite E4M3 value.
pub const E4M3_MAX: f32 = 448.0;
/// Floor of the block amax (keeps the scale of an all-zero block finite).
pub const AMAX_FLOOR: f32 = 1e-4;

/// `ceil(log2(x))` for a positive finite f32, exactly (from the bits, no libm rounding).
pub fn ceil_log2(x: f32) -> i32 {
    let bits = x.to_bits();
    let exp_field = ((bits >> 23) & 0xff) as i32;
    let mant = bits & 0x7f_ffff;
    if exp_field == 0 {
        // Subnormal: x = mant * 2^-149; cannot occur for x >= AMAX_FLOOR / 448.
        let top = 31 - mant.leading_zeros() as i32; // position of the leading 1
        let e = top - 149;
        return if mant.is_power_of_two() { e } else { e + 1 };
    }
    let e = exp_field - 127;
    if mant == 0 { e } else { e + 1 }
}

/// The E8M0 byte and the f32 scale of one block with absolute maximum `amax`.
pub fn block_scale(amax: f32) -> (u8, f32) {
    let a = if amax.is_nan() {
        f32::MAX
    } else {
        amax.max(AMAX_FLOOR)
    };
    let a = a.min(f32::MAX);
    let e = ceil_log2(a / E4M3_MAX).clamp(-127, 127);
    let byte = (e + 127) as u8;
    (
        byte,
        f32::from_bits(((e + 127) as u32) << 23).max(f32::MIN_POSITIVE),
    )
}

/// Quantizes one row of f32 values (length a multiple of 32) into E4M3 bytes and E8M0 scales.
pub fn quantize_row(vals: &[f32], q: &mut [u8], scales: &mut [u8]) {
    for ((v, q), s) in vals
        .chunks(BLOCK)
        .zip(q.chunks_mut(BLOCK))
        .zip(scales.iter_mut())
    {
        let amax = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let (byte, scale) = block_scale(amax);
        *s = byte;
        for (q, v) in q.iter_mut().zip(v) {
            // Division by a power of two is exact, so this rounds once (in the E4M3 conversion).
            *q = F8E4M3::from_f32(*v / scale).to_bits();
        }
    }
}

/// Decodes an E4M3 byte to f32.
pub fn e4m3_to_f32(b: u8) -> f32 {
    F8E4M3::from_bits(b).to_f32()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceil_log2_is_exact() {
        assert_eq!(ceil_log2(1.0), 0);
        assert_eq!(ceil_log2(1.0000001), 1);
        assert_eq!(ceil_log2(0.5), -1);
        assert_eq!(ceil_log2(0.75), 0);
        assert_eq!(ceil_log2(448.0), 9);
        assert_eq!(ceil_log2(f32::from_bits(1)), -149);
    }

    #[test]
    fn scales_and_values() {
        // amax 448 -> scale 1: values are plain E4M3 roundings.
        let mut v = vec![0f32; 32];
        v[0] = 448.0;
        v[1] = -1.0625; // exactly between 1.0 and 1.125: ties to even -> 1.0
        v[2] = 3.3;
        let (mut q, mut s) = (vec![0u8; 32], vec![0u8; 1]);
        quantize_row(&v, &mut q, &mut s);
        assert_eq!(s[0], 127);
        assert_eq!(e4m3_to_f32(q[0]), 448.0);
        assert_eq!(e4m3_to_f32(q[1]), -1.0);
        assert_eq!(e4m3_to_f32(q[2]), 3.25);
        // amax 449 -> scale 2.
        v[0] = 449.0;
        quantize_row(&v, &mut q, &mut s);
        assert_eq!(s[0], 128);
        assert_eq!(e4m3_to_f32(q[0]), 224.0);
        // all zeros -> amax floor 1e-4 -> 2^ceil(log2(1e-4/448)) = 2^-22.
        let z = vec![0f32; 32];
        quantize_row(&z, &mut q, &mut s);
        assert_eq!(s[0] as i32 - 127, -22);
        assert!(q.iter().all(|&b| b == 0));
    }
}
