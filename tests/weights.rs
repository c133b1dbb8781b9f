//! Checkpoints: written with DeepSeek's tensor names, loaded back (single file and sharded),
//! and refused with a clear error when a tensor is missing, misnamed, misshapen, of the wrong
//! dtype, or the file is truncated or corrupted.

mod common;

use half::bf16;
use mhc::tensor::{HostTensor, TensorMap, read_safetensors, write_safetensors};
use mhc::weights::{Checkpoint, SeamKind, SeamWeights, write_checkpoint};

fn small() -> (mhc::Config, Vec<SeamWeights>, SeamWeights) {
    let mut c = common::cfg(4, 64);
    c.layers = 2;
    let seams = (0..4).map(|s| SeamWeights::synthetic(&c, s)).collect();
    (c.clone(), seams, SeamWeights::synthetic_head(&c, 9))
}

#[test]
fn single_file_roundtrip() {
    let (c, seams, head) = small();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("model.safetensors");
    write_checkpoint(&p, &c, &seams, Some(&head)).unwrap();
    let ck = Checkpoint::open(&p).unwrap();
    assert_eq!(ck.layer_count(), 2);
    assert_eq!(ck.all_seams(&c).unwrap(), seams);
    assert_eq!(ck.head(&c).unwrap(), head);
    // The directory form finds the single file too.
    assert_eq!(
        Checkpoint::open(dir.path()).unwrap().all_seams(&c).unwrap(),
        seams
    );
}

#[test]
fn sharded_roundtrip() {
    let (c, seams, _) = small();
    let dir = tempfile::tempdir().unwrap();
    // Write everything, then split the tensors over two shards with an index.
    let whole = dir.path().join("whole.safetensors");
    write_checkpoint(&whole, &c, &seams, None).unwrap();
    let all = read_safetensors(&whole).unwrap();
    std::fs::remove_file(&whole).unwrap();
    let (mut a, mut b) = (TensorMap::new(), TensorMap::new());
    let mut index = serde_json::Map::new();
    for (i, (k, v)) in all.into_iter().enumerate() {
        let shard = if i % 2 == 0 {
            "model-00001-of-00002.safetensors"
        } else {
            "model-00002-of-00002.safetensors"
        };
        index.insert(k.clone(), shard.into());
        if i % 2 == 0 {
            a.insert(k, v)
        } else {
            b.insert(k, v)
        };
    }
    write_safetensors(&dir.path().join("model-00001-of-00002.safetensors"), &a).unwrap();
    write_safetensors(&dir.path().join("model-00002-of-00002.safetensors"), &b).unwrap();
    let idx = serde_json::json!({"metadata": {}, "weight_map": index});
    std::fs::write(
        dir.path().join("model.safetensors.index.json"),
        idx.to_string(),
    )
    .unwrap();
    let ck = Checkpoint::open(dir.path()).unwrap();
    assert_eq!(ck.all_seams(&c).unwrap(), seams);
}

fn err_of(m: &TensorMap, c: &mhc::Config) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.safetensors");
    write_safetensors(&p, m).unwrap();
    let ck = Checkpoint::open(&p).unwrap();
    match ck.all_seams(c) {
        Ok(_) => panic!("a broken checkpoint loaded"),
        Err(e) => e.to_string(),
    }
}

fn base_map() -> (mhc::Config, TensorMap) {
    let (c, seams, _) = small();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.safetensors");
    write_checkpoint(&p, &c, &seams, None).unwrap();
    (c, read_safetensors(&p).unwrap())
}

#[test]
fn missing_misnamed_misshapen_and_wrong_dtype_are_named() {
    let (c, m) = base_map();
    let name = SeamKind::Ffn.names(1)[0].clone(); // layers.1.hc_ffn_fn

    let mut miss = m.clone();
    let t = miss.remove(&name).unwrap();
    let e = err_of(&miss, &c);
    assert!(e.contains(&name) && e.contains("missing"), "{e}");

    miss.insert("layers.1.hc_ffn_fnx".into(), t.clone()); // misnamed
    let e = err_of(&miss, &c);
    assert!(e.contains(&name), "{e}");

    let mut shape = m.clone();
    shape.insert(
        name.clone(),
        HostTensor::f32(&name, &[24, 128], vec![0.5; 24 * 128]).unwrap(),
    );
    let e = err_of(&shape, &c);
    assert!(
        e.contains(&name) && e.contains("[24, 256]") && e.contains("[24, 128]"),
        "{e}"
    );

    let mut dtype = m.clone();
    dtype.insert(
        name.clone(),
        HostTensor::bf16(&name, &[24, 256], vec![bf16::ONE; 24 * 256]).unwrap(),
    );
    let e = err_of(&dtype, &c);
    assert!(
        e.contains(&name) && e.contains("f32") && e.contains("BF16"),
        "{e}"
    );
}

#[test]
fn truncated_or_corrupted_files_are_refused() {
    let (c, seams, _) = small();
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.safetensors");
    write_checkpoint(&p, &c, &seams, None).unwrap();
    let bytes = std::fs::read(&p).unwrap();
    for cut in [0, 4, 8, 100, bytes.len() / 2, bytes.len() - 1] {
        std::fs::write(&p, &bytes[..cut]).unwrap();
        let e = Checkpoint::open(&p)
            .err()
            .expect("truncated file opened")
            .to_string();
        assert!(e.contains("safetensors"), "cut {cut}: {e}");
    }
    let mut garbage = bytes.clone();
    for b in &mut garbage[8..40] {
        *b = b'#';
    }
    std::fs::write(&p, &garbage).unwrap();
    assert!(Checkpoint::open(&p).is_err());
    let mut huge = bytes.clone();
    huge[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&p, &huge).unwrap();
    assert!(Checkpoint::open(&p).is_err());
    assert!(Checkpoint::open(&dir.path().join("absent.safetensors")).is_err());
}
