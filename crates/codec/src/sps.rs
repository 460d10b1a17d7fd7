//! Rewrites the frame cropping of an H.264 sequence parameter set.
//!
//! Key design choice: OpenH264 only accepts pictures of at least 16x16 and
//! crops to exactly the size it was fed, so pictures are padded here and the
//! SPS's `frame_crop_*_offset` fields (ITU-T H.264 7.3.2.1.1, 7.4.2.1.1) are
//! rewritten to the wanted size. The SPS is parsed only up to the cropping
//! fields; everything after them (VUI) is copied bit for bit, so nothing the
//! encoder chose is lost. Emulation prevention bytes are removed before and
//! re-inserted after.

use crate::CodecError;

/// `profile_idc` values whose SPS carries chroma format and bit depths.
const CHROMA_PROFILES: [u32; 13] = [100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135];

fn sps_err(reason: impl Into<String>) -> CodecError {
    CodecError::Encode {
        frame: 0,
        reason: format!("SPS: {}", reason.into()),
    }
}

/// NAL payload to RBSP: drops each `03` that follows `00 00`.
fn unescape(nal: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(nal.len());
    let mut zeros = 0;
    for &b in nal {
        if zeros >= 2 && b == 3 {
            zeros = 0;
            continue;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

/// RBSP to NAL payload: inserts `03` wherever `00 00` precedes a byte <= 3.
fn escape(rbsp: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(rbsp.len() + 4);
    let mut zeros = 0;
    for &b in rbsp {
        if zeros >= 2 && b <= 3 {
            out.push(3);
            zeros = 0;
        }
        zeros = if b == 0 { zeros + 1 } else { 0 };
        out.push(b);
    }
    out
}

struct Bits<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Bits<'_> {
    fn bit(&mut self) -> Result<u32, CodecError> {
        let byte = self
            .b
            .get(self.pos / 8)
            .ok_or_else(|| sps_err("ends early"))?;
        let v = (byte >> (7 - self.pos % 8)) & 1;
        self.pos += 1;
        Ok(u32::from(v))
    }

    fn bits(&mut self, n: u32) -> Result<u32, CodecError> {
        let mut v = 0;
        for _ in 0..n {
            v = (v << 1) | self.bit()?;
        }
        Ok(v)
    }

    /// Unsigned Exp-Golomb (9.1).
    fn ue(&mut self) -> Result<u32, CodecError> {
        let mut zeros = 0;
        while self.bit()? == 0 {
            zeros += 1;
            if zeros > 31 {
                return Err(sps_err("Exp-Golomb code too long"));
            }
        }
        Ok(((1u64 << zeros) - 1 + u64::from(self.bits(zeros)?)) as u32)
    }
}

#[derive(Default)]
struct BitWriter {
    out: Vec<u8>,
    n: usize,
}

impl BitWriter {
    fn bit(&mut self, v: u32) {
        if self.n.is_multiple_of(8) {
            self.out.push(0);
        }
        if v & 1 == 1
            && let Some(last) = self.out.last_mut()
        {
            *last |= 0x80 >> (self.n % 8);
        }
        self.n += 1;
    }

    fn ue(&mut self, v: u32) {
        let x = u64::from(v) + 1;
        let len = 64 - x.leading_zeros();
        for _ in 1..len {
            self.bit(0);
        }
        for i in (0..len).rev() {
            self.bit((x >> i) as u32 & 1);
        }
    }
}

/// The fields of an SPS this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpsSize {
    /// Coded width in macroblocks.
    pub width_mbs: u32,
    /// Coded height in map units (macroblocks for progressive streams).
    pub height_mbs: u32,
    /// Cropping (left, right, top, bottom) in 2-pixel units, if present.
    pub crop: Option<[u32; 4]>,
}

impl SpsSize {
    /// The displayed size after cropping, for 4:2:0 frame-only streams.
    pub fn cropped(&self) -> (u32, u32) {
        let [l, r, t, b] = self.crop.unwrap_or([0; 4]);
        let crop = |v: u32, a: u32, b: u32| {
            v.saturating_mul(16)
                .saturating_sub(a.saturating_add(b).saturating_mul(2))
        };
        (crop(self.width_mbs, l, r), crop(self.height_mbs, t, b))
    }
}

/// Reads up to the cropping fields; returns the size fields and the bit
/// position of `frame_cropping_flag`.
fn read_to_crop(rbsp: &[u8]) -> Result<(SpsSize, usize), CodecError> {
    let mut r = Bits { b: rbsp, pos: 8 }; // past the NAL header byte
    let profile = r.bits(8)?;
    r.bits(16)?; // constraint flags, level_idc
    r.ue()?; // seq_parameter_set_id
    if CHROMA_PROFILES.contains(&profile) {
        let chroma = r.ue()?;
        if chroma != 1 {
            return Err(sps_err(format!(
                "chroma_format_idc {chroma}, expected 4:2:0"
            )));
        }
        r.ue()?; // bit_depth_luma_minus8
        r.ue()?; // bit_depth_chroma_minus8
        r.bit()?; // qpprime_y_zero_transform_bypass_flag
        if r.bit()? == 1 {
            return Err(sps_err("scaling matrices are not supported"));
        }
    }
    r.ue()?; // log2_max_frame_num_minus4
    match r.ue()? {
        0 => {
            r.ue()?; // log2_max_pic_order_cnt_lsb_minus4
        }
        1 => {
            r.bit()?; // delta_pic_order_always_zero_flag
            r.ue()?; // offset_for_non_ref_pic (se, same code length)
            r.ue()?; // offset_for_top_to_bottom_field
            for _ in 0..r.ue()? {
                r.ue()?; // offset_for_ref_frame[i]
            }
        }
        _ => {}
    }
    r.ue()?; // max_num_ref_frames
    r.bit()?; // gaps_in_frame_num_value_allowed_flag
    let width_mbs = r.ue()? + 1;
    let height_mbs = r.ue()? + 1;
    if r.bit()? == 0 {
        return Err(sps_err("interlaced (field) coding is not supported"));
    }
    r.bit()?; // direct_8x8_inference_flag
    let at = r.pos;
    let crop = if r.bit()? == 1 {
        Some([r.ue()?, r.ue()?, r.ue()?, r.ue()?])
    } else {
        None
    };
    Ok((
        SpsSize {
            width_mbs,
            height_mbs,
            crop,
        },
        at,
    ))
}

/// The size fields of an SPS NAL unit (with its header byte).
pub fn read(nal: &[u8]) -> Result<SpsSize, CodecError> {
    read_to_crop(&unescape(nal)).map(|(s, _)| s)
}

/// Returns `nal` with its cropping set so the picture is `width x height`
/// (both even and at most the coded size), cropping right and bottom.
pub fn with_crop(nal: &[u8], width: u32, height: u32) -> Result<Vec<u8>, CodecError> {
    let rbsp = unescape(nal);
    let (size, at) = read_to_crop(&rbsp)?;
    let (cw, ch) = (
        size.width_mbs.saturating_mul(16),
        size.height_mbs.saturating_mul(16),
    );
    if width % 2 == 1 || height % 2 == 1 || width == 0 || height == 0 || width > cw || height > ch {
        return Err(sps_err(format!(
            "cannot crop {cw}x{ch} to {width}x{height}"
        )));
    }
    // Skip the old cropping fields to find where the copied tail starts.
    let mut r = Bits { b: &rbsp, pos: at };
    if r.bit()? == 1 {
        for _ in 0..4 {
            r.ue()?;
        }
    }
    let tail_start = r.pos;
    // The tail ends before the rbsp_stop_one_bit: the last 1 bit of the RBSP.
    let last = rbsp
        .iter()
        .rposition(|&b| b != 0)
        .ok_or_else(|| sps_err("no stop bit"))?;
    let stop = last * 8 + 7 - rbsp[last].trailing_zeros() as usize;
    if stop < tail_start {
        return Err(sps_err("stop bit inside the cropping fields"));
    }
    let mut w = BitWriter::default();
    let mut copy = Bits { b: &rbsp, pos: 0 };
    while copy.pos < at {
        w.bit(copy.bit()?);
    }
    let (right, bottom) = ((cw - width) / 2, (ch - height) / 2);
    if right == 0 && bottom == 0 {
        w.bit(0);
    } else {
        w.bit(1);
        for v in [0, right, 0, bottom] {
            w.ue(v);
        }
    }
    copy.pos = tail_start;
    while copy.pos < stop {
        w.bit(copy.bit()?);
    }
    w.bit(1); // rbsp_stop_one_bit; the writer pads with zeros
    Ok(escape(&w.out))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn exp_golomb_round_trip() {
        let mut w = BitWriter::default();
        let vals = [0u32, 1, 2, 3, 7, 8, 254, 255, 1000, 65_535];
        for v in vals {
            w.ue(v);
        }
        let mut r = Bits { b: &w.out, pos: 0 };
        for v in vals {
            assert_eq!(r.ue().unwrap(), v);
        }
        // Spec table 9-2: 3 -> 00100.
        let mut w = BitWriter::default();
        w.ue(3);
        assert_eq!(w.out, vec![0b0010_0000]);
    }

    #[test]
    fn emulation_prevention_round_trip() {
        let raw = [0x67, 0, 0, 1, 0, 0, 0, 0, 0, 3, 5, 0, 0];
        let esc = escape(&raw);
        assert_eq!(esc, vec![0x67, 0, 0, 3, 1, 0, 0, 3, 0, 0, 3, 0, 3, 5, 0, 0]);
        assert_eq!(unescape(&esc), raw);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod encoder_tests {
    use super::*;
    use crate::{h264, yuv};

    /// Real OpenH264 SPSs, rewritten to sizes below, at and above the
    /// encoder's 16x16 minimum, read back to the requested size; the parts
    /// after the cropping (VUI) survive unchanged.
    #[test]
    fn rewrites_openh264_sps() {
        for (w, h) in [(8usize, 6usize), (16, 16), (50, 38), (64, 64)] {
            let rgb: Vec<u8> = (0..w * h * 3).map(|i| (i * 37 % 251) as u8).collect();
            let pic = yuv::rgb_to_i420(&rgb, w, h);
            let s = h264::encode([Ok(pic)], 10.0, (w as u32, h as u32)).unwrap();
            let size = read(&s.sps).unwrap();
            assert_eq!(size.cropped(), (w as u32, h as u32));
            let (_, at) = read_to_crop(&unescape(&s.sps)).unwrap();
            // Re-crop to the full coded size and back: the round trip is exact.
            let (cw, ch) = (16 * size.width_mbs, 16 * size.height_mbs);
            let full = with_crop(&s.sps, cw, ch).unwrap();
            assert_eq!(read(&full).unwrap().crop, None);
            assert_eq!(with_crop(&full, w as u32, h as u32).unwrap(), s.sps);
            assert!(at > 8);
        }
    }
}
