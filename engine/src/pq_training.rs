//! PQ training as a job any number of threads can work on, joining at any time.
//!
//! Every subspace's k-means is independent of the others (its own slice of the sample, its own
//! seed), so a subspace gives the same centroids whichever thread trains it and whenever. The
//! job hands subspaces out from a counter: [`ProductQuantizer::train_with`] starts its threads
//! on it at once, and an index build (`index::build`) starts one worker on it while the calling
//! thread places edge lists, then lets the caller join when placement is done. Either way the
//! codebook is the one a single thread training subspace after subspace would produce.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::kmeans::{self, KMeansConfig, RowsView};
use crate::pq::{
    check_rows_finite, check_shape, sample_rows, subspace_bounds, subspace_major_copy, PqError,
    PqTrainConfig, ProductQuantizer, MAX_CENTROIDS,
};
use crate::Metric;

/// One subspace's centroids, or why its k-means failed; `None` until it is trained.
type SubspaceResult = Option<Result<Vec<f32>, PqError>>;

/// A sampled, subspace-major training set and the subspaces still to train.
pub struct PqTraining {
    metric: Metric,
    dim: usize,
    rows: usize,
    k: usize,
    bounds: Vec<usize>,
    seeds: Vec<u64>,
    max_iters: usize,
    /// Threads each k-means uses: more than one only when the configured threads outnumber
    /// the subspaces (fixed here, not by who joins, so results never depend on the joiners).
    kmeans_threads: usize,
    sample: Vec<f32>,
    next: AtomicUsize,
    parts: Mutex<Vec<SubspaceResult>>,
}

impl PqTraining {
    /// Samples and copies the training rows of `n` rows of `dim` values; checks shape and
    /// values as [`ProductQuantizer::train_with`] documents.
    pub fn prepare(
        data: &[f32],
        dim: usize,
        n: usize,
        pq_bytes: usize,
        metric: Metric,
        config: &PqTrainConfig,
    ) -> Result<PqTraining, PqError> {
        check_shape(dim, pq_bytes)?;
        if n.checked_mul(dim) != Some(data.len()) {
            return Err(PqError::BadInput(format!(
                "{} training values do not form {n} rows of {dim} dimensions",
                data.len()
            )));
        }
        if n == 0 {
            return Err(PqError::BadInput(
                "PQ training needs at least one row".into(),
            ));
        }
        if config.max_sample == 0 || config.max_iters == 0 {
            return Err(PqError::BadParameter(
                "PQ training sample and iterations must be positive".into(),
            ));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let rows = sample_rows(n, config.max_sample, &mut rng);
        check_rows_finite(data, dim, &rows)?;
        let bounds = subspace_bounds(dim, pq_bytes);
        let sample = subspace_major_copy(data, dim, &rows, &bounds);
        let seeds: Vec<u64> = (0..pq_bytes).map(|_| rng.gen()).collect();
        let workers = config.threads.clamp(1, pq_bytes);
        Ok(PqTraining {
            metric,
            dim,
            rows: rows.len(),
            k: MAX_CENTROIDS.min(rows.len()),
            bounds,
            seeds,
            max_iters: config.max_iters,
            kmeans_threads: (config.threads / workers).max(1),
            sample,
            next: AtomicUsize::new(0),
            parts: Mutex::new((0..pq_bytes).map(|_| None).collect()),
        })
    }

    /// Trains subspaces on the calling thread until none is left to take.
    pub fn work(&self) {
        loop {
            let s = self.next.fetch_add(1, Ordering::Relaxed);
            if s >= self.seeds.len() {
                return;
            }
            let part = self.train_subspace(s);
            self.parts.lock().unwrap_or_else(|e| e.into_inner())[s] = Some(part);
        }
    }

    /// Hands out no more subspaces: threads in [`PqTraining::work`] return once their current
    /// one is trained. For a build that is being cancelled.
    pub fn abandon(&self) {
        self.next.fetch_max(self.seeds.len(), Ordering::Relaxed);
    }

    /// [`PqTraining::work`] on `threads` threads, the caller one of them.
    pub fn train_on(&self, threads: usize) {
        let helpers = threads.clamp(1, self.seeds.len()) - 1;
        std::thread::scope(|scope| {
            for _ in 0..helpers {
                scope.spawn(|| self.work());
            }
            self.work();
        });
    }

    /// The codebook, once every subspace has been trained (by [`PqTraining::work`] calls that
    /// have all returned).
    pub fn finish(self) -> Result<ProductQuantizer, PqError> {
        let parts = self.parts.into_inner().unwrap_or_else(|e| e.into_inner());
        let mut codebook = Vec::with_capacity(self.k * self.dim);
        for (s, part) in parts.into_iter().enumerate() {
            match part {
                Some(centroids) => codebook.extend(centroids?),
                None => {
                    return Err(PqError::BadParameter(format!(
                        "PQ subspace {s} was never trained"
                    )))
                }
            }
        }
        Ok(ProductQuantizer::assemble(
            self.metric,
            self.dim,
            self.k,
            self.bounds,
            codebook,
        ))
    }

    fn train_subspace(&self, s: usize) -> Result<Vec<f32>, PqError> {
        let (first, end) = (self.bounds[s], self.bounds[s + 1]);
        let block = &self.sample[self.rows * first..self.rows * end];
        let view =
            RowsView::full(block, end - first).map_err(|e| PqError::BadInput(e.to_string()))?;
        let mut config = KMeansConfig::new(self.k, self.seeds[s]);
        config.max_iters = self.max_iters;
        config.threads = self.kmeans_threads;
        let result = kmeans::train(&view, &config).map_err(|e| PqError::BadInput(e.to_string()))?;
        Ok(result.centroids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: usize, dim: usize) -> Vec<f32> {
        crate::dataset::synthetic_clustered(n, dim, 8, 3)
    }

    #[test]
    fn joining_late_gives_the_codebook_of_one_thread() {
        let (n, dim, m) = (3000, 24, 6);
        let config = PqTrainConfig::new(11, 2);
        let serial = {
            let job = PqTraining::prepare(&data(n, dim), dim, n, m, Metric::L2, &config).unwrap();
            job.work();
            job.finish().unwrap()
        };
        let rows = data(n, dim);
        let job = PqTraining::prepare(&rows, dim, n, m, Metric::L2, &config).unwrap();
        std::thread::scope(|scope| {
            scope.spawn(|| job.work());
            // The caller joins after doing something else, as a build does after placement.
            std::thread::sleep(std::time::Duration::from_millis(5));
            job.work();
        });
        let joined = job.finish().unwrap();
        assert_eq!(serial.codebook(), joined.codebook());
        let trained = ProductQuantizer::train_with(&rows, dim, n, m, Metric::L2, &config).unwrap();
        assert_eq!(serial.codebook(), trained.codebook());
    }

    #[test]
    fn an_unfinished_job_is_an_error_not_a_codebook() {
        let (n, dim) = (500, 8);
        let job = PqTraining::prepare(
            &data(n, dim),
            dim,
            n,
            4,
            Metric::L2,
            &PqTrainConfig::new(1, 1),
        )
        .unwrap();
        assert!(job.finish().is_err());
    }
}
