//! The digit images shipped under `examples/data/` (IDX files, the MNIST layout; `.gz` allowed),
//! as normalized `f32` batches.

use std::io::Read;
use std::path::Path;

use burn::tensor::{Device, Int, Tensor, TensorData};

/// One split of a dataset: `n` images of `height x width`, normalized to zero mean and unit
/// variance over the training split, and their labels.
pub struct Split {
    pub images: Vec<f32>,
    pub labels: Vec<u8>,
    pub height: usize,
    pub width: usize,
}

/// Read an IDX file, gunzipping `<path>.gz` when the plain file is absent. Returns the dims and
/// the raw bytes.
fn read_idx(path: &Path) -> Result<(Vec<usize>, Vec<u8>), String> {
    let mut bytes = Vec::new();
    if path.exists() {
        bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    } else {
        let mut gz = path.as_os_str().to_owned();
        gz.push(".gz");
        let gz = Path::new(&gz);
        let file = std::fs::File::open(gz).map_err(|e| format!("{}: {e}", gz.display()))?;
        flate2::read::GzDecoder::new(file)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{}: {e}", gz.display()))?;
    }
    if bytes.len() < 4 || bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 8 {
        return Err(format!("{}: not a u8 IDX file", path.display()));
    }
    let rank = bytes[3] as usize;
    let header = 4 + 4 * rank;
    let dims: Vec<usize> = (0..rank)
        .map(|i| u32::from_be_bytes(bytes[4 + 4 * i..8 + 4 * i].try_into().unwrap()) as usize)
        .collect();
    let data = bytes.get(header..).unwrap_or_default().to_vec();
    if data.len() != dims.iter().product::<usize>() {
        return Err(format!(
            "{}: {} bytes for dims {dims:?}",
            path.display(),
            data.len()
        ));
    }
    Ok((dims, data))
}

/// Load `{train,test}-{images-idx3,labels-idx1}-ubyte` from `dir`, pixels divided by `scale`,
/// then standardized with the training split's mean and deviation.
pub fn load(dir: &Path, scale: f32) -> Result<(Split, Split), String> {
    let split = |name: &str| -> Result<(Vec<f32>, Vec<u8>, usize, usize), String> {
        let (dims, pixels) = read_idx(&dir.join(format!("{name}-images-idx3-ubyte")))?;
        let (_, labels) = read_idx(&dir.join(format!("{name}-labels-idx1-ubyte")))?;
        if dims.len() != 3 || dims[0] != labels.len() {
            return Err(format!(
                "{name}: images {dims:?} vs {} labels",
                labels.len()
            ));
        }
        let images = pixels.iter().map(|&p| p as f32 / scale).collect();
        Ok((images, labels, dims[1], dims[2]))
    };
    let (mut train_images, train_labels, height, width) = split("train")?;
    let (mut test_images, test_labels, ..) = split("test")?;
    let n = train_images.len() as f64;
    let mean = train_images.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = train_images
        .iter()
        .map(|&v| (v as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let (mean, std) = (mean as f32, var.sqrt() as f32);
    for v in train_images.iter_mut().chain(test_images.iter_mut()) {
        *v = (*v - mean) / std;
    }
    let train = Split {
        images: train_images,
        labels: train_labels,
        height,
        width,
    };
    let test = Split {
        images: test_images,
        labels: test_labels,
        height,
        width,
    };
    Ok((train, test))
}

impl Split {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// The images and labels at `order[..]`, as `(batch, 1, height, width)` and `(batch)`.
    pub fn batch(&self, order: &[usize], device: &Device) -> (Tensor<4>, Tensor<1, Int>) {
        let size = self.height * self.width;
        let mut images = Vec::with_capacity(order.len() * size);
        for &i in order {
            images.extend_from_slice(&self.images[i * size..(i + 1) * size]);
        }
        let labels: Vec<i64> = order.iter().map(|&i| self.labels[i] as i64).collect();
        let shape = [order.len(), 1, self.height, self.width];
        (
            Tensor::from_data(TensorData::new(images, shape), device),
            Tensor::from_data(TensorData::new(labels, [order.len()]), device),
        )
    }
}

/// A seeded Fisher-Yates shuffle of `0..n` (splitmix64), so runs are repeatable.
pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        order.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    order
}
