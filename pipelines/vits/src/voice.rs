//! The speech pipeline: text → sentences (espeak-ng) → one synthesis stage per
//! sentence → mono samples, packed as WAV or FLAC.
//!
//! Key design choice: the hold is host data only — the finished sentences'
//! samples and the next sentence's index — and each sentence draws its noise
//! from its own seeded stream ([`Normals::for_sentence`]), so a preempted job
//! resumes to exactly the bytes of an uninterrupted run, and sentence `s` never
//! depends on how earlier sentences were scheduled.

use favlo_pipeline::{
    Control, MediaError, MediaFile, MediaHold, MediaJob, MediaKind, MediaOutput, MediaPaused,
    MediaPipeline, PipelineError, Signal,
};

use crate::audio;
use crate::config::VoiceConfig;
use crate::model::{Noise, Vits};
use crate::noise::Normals;
use crate::phonemize::{Phonemizer, Sentence};
use crate::request::{SpeechParams, speech_params};

/// What a voice job holds while preempted.
#[derive(Debug)]
struct VoiceHold {
    job: String,
    /// Sentences finished.
    done: usize,
    samples: Vec<f32>,
}

/// A Piper voice served as a [`MediaPipeline`] of kind `voice`.
#[derive(Debug)]
pub struct PiperVoice {
    vits: Vits,
    config: VoiceConfig,
    phonemizer: Phonemizer,
    max_frames: usize,
}

impl PiperVoice {
    /// Wraps a loaded network with its config and phonemizer; sentences longer
    /// than `max_frames` frames are refused.
    pub fn new(vits: Vits, config: VoiceConfig, phonemizer: Phonemizer, max_frames: usize) -> Self {
        PiperVoice {
            vits,
            config,
            phonemizer,
            max_frames,
        }
    }

    /// The voice's config.
    pub fn config(&self) -> &VoiceConfig {
        &self.config
    }

    /// The network.
    pub fn vits(&self) -> &Vits {
        &self.vits
    }

    /// The sentences (stages) of a text.
    pub fn sentences(&self, text: &str) -> Result<Vec<Sentence>, PipelineError> {
        Ok(self.phonemizer.sentences(text)?)
    }

    /// Samples of sentence `index` of a job (its own seeded noise stream).
    pub fn sentence_samples(
        &self,
        sentence: &Sentence,
        index: usize,
        params: &SpeechParams,
    ) -> Result<Vec<f32>, PipelineError> {
        let mut stream = Normals::for_sentence(params.seed, index);
        Ok(self.vits.synthesize(
            &sentence.ids,
            params.scales,
            Noise::Stream(&mut stream),
            self.max_frames,
            None,
        )?)
    }
}

impl MediaPipeline for PiperVoice {
    fn parse(&self, id: &str, body: &serde_json::Value) -> Result<MediaJob, PipelineError> {
        let p = speech_params(id, body, self.config.scales)?;
        Ok(MediaJob {
            id: id.to_string(),
            kind: MediaKind::Voice,
            params: p.to_json(),
        })
    }

    /// Checks `control` after every sentence but the last (a cancel also before
    /// the first). A resumed call always finishes at least one sentence.
    fn generate(
        &mut self,
        job: &MediaJob,
        hold: Option<MediaHold>,
        control: &Control,
    ) -> Result<MediaOutput, MediaError> {
        if control.signal() == Some(Signal::Cancel) {
            return Err(MediaPaused::Cancel.into());
        }
        let out = self.run_job(job, hold, control);
        self.vits.release_scratch();
        out
    }

    /// The job's sentence count (its text is phonemized to know it).
    fn stages(&self, job: &MediaJob) -> Option<usize> {
        let p = SpeechParams::from_json(&job.params).ok()?;
        self.sentences(&p.text).ok().map(|s| s.len())
    }

    fn pack(&self, job: &MediaJob, output: MediaOutput) -> Result<MediaFile, PipelineError> {
        pack(job, output)
    }
}

impl PiperVoice {
    fn run_job(
        &self,
        job: &MediaJob,
        hold: Option<MediaHold>,
        control: &Control,
    ) -> Result<MediaOutput, MediaError> {
        let params = SpeechParams::from_json(&job.params)?;
        let sentences = self.sentences(&params.text)?;
        if sentences.is_empty() {
            return Err(PipelineError::invalid(
                "text has nothing to speak (no phonemes after espeak-ng)",
                Some("text"),
            )
            .into());
        }
        let (mut done, mut samples) = match hold {
            Some(h) => {
                let h = h
                    .state
                    .downcast::<VoiceHold>()
                    .map_err(|_| PipelineError::internal("vits: foreign hold"))?;
                if h.job != job.id || h.done > sentences.len() {
                    return Err(PipelineError::internal("vits: hold of another job").into());
                }
                (h.done, h.samples)
            }
            None => (0, Vec::new()),
        };
        while done < sentences.len() {
            let s = self.sentence_samples(&sentences[done], done, &params)?;
            samples.extend_from_slice(&s);
            done += 1;
            if done < sentences.len() {
                control.check(|| MediaHold {
                    stage: done,
                    state: Box::new(VoiceHold {
                        job: job.id.clone(),
                        done,
                        samples: samples.clone(),
                    }),
                })?;
            }
        }
        Ok(MediaOutput::Audio {
            sample_rate: self.config.sample_rate,
            channels: 1,
            samples,
        })
    }
}

/// The saved file is always the uncompressed WAV; the media store derives the
/// FLAC download beside it and serves the job's `response_format`.
fn pack(_job: &MediaJob, output: MediaOutput) -> Result<MediaFile, PipelineError> {
    let MediaOutput::Audio {
        sample_rate,
        channels: 1,
        samples,
    } = output
    else {
        return Err(PipelineError::internal("vits: not a mono audio output"));
    };
    Ok(MediaFile {
        mime: "audio/wav".into(),
        extension: "wav".into(),
        bytes: audio::wav(&samples, sample_rate)?,
    })
}
