//! Several engines served as one: [`Engines`] is an [`Engine`] that hosts others (a second
//! model family beside the first, say) and routes each request to the engine that owns its
//! voice or model.
//!
//! A transport serves it as it serves any engine: its capabilities are the union of the
//! hosted ones' (every voice and model listed), with each hosted engine's own capabilities in
//! [`EngineCapabilities::hosted`], so that the core checks a request against the engine that
//! will serve it and encodes its audio at that engine's sample rate
//! ([`EngineCapabilities::sample_rate_for`]). Adding an engine needs no transport change.

use std::sync::Arc;

use crate::engine::{Engine, EngineCapabilities, EngineLoad, EventSink, RequestId, SynthesisRequest};

/// Engines served as one; see the [module docs](self).
pub struct Engines {
    engines: Vec<Arc<dyn Engine>>,
    capabilities: EngineCapabilities,
}

impl Engines {
    /// `engines` served as one, in routing order: the first one's default voice, model and
    /// sample rate are the defaults, and a voice or model two of them declare is the first's.
    /// `None` for no engine.
    pub fn new(engines: Vec<Arc<dyn Engine>>) -> Option<Engines> {
        let hosted: Vec<EngineCapabilities> = engines.iter().map(|e| e.capabilities().clone()).collect();
        let capabilities = EngineCapabilities::hosting(hosted)?;
        Some(Engines { engines, capabilities })
    }

    /// The hosted engines, in routing order.
    pub fn engines(&self) -> &[Arc<dyn Engine>] {
        &self.engines
    }
}

impl Engine for Engines {
    fn capabilities(&self) -> &EngineCapabilities {
        &self.capabilities
    }

    /// The hosted engines' loads added up; the usage the fullest one's (its voices' clients are
    /// the next refused).
    fn load(&self) -> EngineLoad {
        let mut total = EngineLoad::default();
        for engine in &self.engines {
            let load = engine.load();
            total.queued += load.queued;
            total.running += load.running;
            for (size, count) in load.batch_sizes {
                match total.batch_sizes.iter_mut().find(|(s, _)| *s == size) {
                    Some((_, n)) => *n += count,
                    None => total.batch_sizes.push((size, count)),
                }
            }
            total.workers.extend(load.workers);
            total.streams.chunks += load.streams.chunks;
            total.streams.underruns += load.streams.underruns;
            total.streams.refused += load.streams.refused;
            total.streams.delayed += load.streams.delayed;
            total.usage = total.usage.max(load.usage);
            if total.streams.lateness.bounds.is_empty() {
                total.streams.lateness = load.streams.lateness;
            } else if total.streams.lateness.bounds == load.streams.lateness.bounds {
                for (sum, count) in total.streams.lateness.counts.iter_mut().zip(load.streams.lateness.counts) {
                    *sum += count;
                }
                total.streams.lateness.sum += load.streams.lateness.sum;
            }
        }
        total.batch_sizes.sort_unstable();
        total
    }

    /// The first hosted engine's failure: its voices can no longer be served.
    fn failure(&self) -> Option<String> {
        self.engines.iter().find_map(|engine| engine.failure())
    }

    /// To the engine that owns the request's voice (resolved by the core), else its model's,
    /// else the first ([`EngineCapabilities::route`]).
    fn submit(&self, id: RequestId, request: SynthesisRequest, sink: Box<dyn EventSink>) {
        let index = self.capabilities.route(&request).unwrap_or(0);
        if let Some(engine) = self.engines.get(index) {
            engine.submit(id, request, sink);
        }
    }

    /// To every hosted engine: only the one that has the request acts on it (the others ignore
    /// an id they do not know), and no table of requests is kept.
    fn abort(&self, id: RequestId) {
        for engine in &self.engines {
            engine.abort(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::engine::{EngineEvent, EngineEventKind, Voice};

    /// Answers every request with one chunk of silence at its rate, tagged with its engine's
    /// voice count so the test can tell the engines apart.
    struct Tone(EngineCapabilities);

    impl Engine for Tone {
        fn capabilities(&self) -> &EngineCapabilities {
            &self.0
        }

        fn submit(&self, id: RequestId, _request: SynthesisRequest, sink: Box<dyn EventSink>) {
            let sample_rate = self.0.sample_rate;
            let _ = sink.try_send(EngineEvent { id, kind: EngineEventKind::Audio { pcm: vec![0; 2], sample_rate } });
        }

        fn abort(&self, _id: RequestId) {}
    }

    struct Channel(mpsc::Sender<EngineEvent>);
    impl EventSink for Channel {
        fn send(&self, event: EngineEvent) -> bool {
            self.0.send(event).is_ok()
        }
    }

    fn two() -> Engines {
        let a = EngineCapabilities::new("alpha", 24_000).with_voices(["vivian", "serena"]);
        let b = EngineCapabilities::new("beta", 22_050).with_voices([Voice::new("Kestrel").with_language("en-GB")]);
        Engines::new(vec![Arc::new(Tone(a)), Arc::new(Tone(b))]).expect("two engines")
    }

    #[test]
    fn requests_go_to_the_engine_of_their_voice_else_their_model() {
        let engines = two();
        let caps = engines.capabilities();
        assert_eq!(caps.models, ["alpha", "beta"]);
        let ids: Vec<&str> = caps.voices.iter().map(|v| v.id.as_str()).collect();
        assert_eq!(ids, ["vivian", "serena", "Kestrel"]);
        assert_eq!(caps.sample_rate, 24_000);
        let (tx, rx) = mpsc::channel();
        for (voice, model, rate) in [
            (Some("kestrel"), None, 22_050),
            (Some("serena"), Some("beta"), 24_000),
            (None, Some("beta"), 22_050),
            (None, None, 24_000),
            (Some("default"), Some("beta"), 22_050),
        ] {
            let request = SynthesisRequest {
                voice: voice.map(str::to_owned),
                model: model.map(str::to_owned),
                ..SynthesisRequest::new("x")
            };
            assert_eq!(caps.sample_rate_for(&request), rate, "{voice:?} {model:?}");
            engines.submit(RequestId { connection: 1, utterance: 0 }, request, Box::new(Channel(tx.clone())));
            let event = rx.try_recv().expect("an event");
            assert!(matches!(event.kind, EngineEventKind::Audio { sample_rate, .. } if sample_rate == rate));
        }
    }

    #[test]
    fn a_request_is_checked_against_its_own_engine() {
        let mut a = EngineCapabilities::new("alpha", 24_000).with_voices(["vivian"]);
        a.instructions = false;
        let b = EngineCapabilities::new("beta", 22_050).with_voices(["kestrel"]).with_word_timestamps(true);
        let engines = Engines::new(vec![Arc::new(Tone(a)), Arc::new(Tone(b))]).expect("two engines");
        let caps = engines.capabilities();
        assert!(caps.instructions);
        let with = |voice: &str| SynthesisRequest {
            voice: Some(voice.to_owned()),
            instructions: Some("whisper".into()),
            ..SynthesisRequest::new("x")
        };
        assert_eq!(caps.check(&with("kestrel")), Ok(()));
        let refusal = caps.check(&with("vivian")).expect_err("alpha has no instructions");
        assert!(refusal.starts_with("instructions are not supported by alpha"), "{refusal}");
        assert_eq!(caps.check(&with("nobody")).ok(), None);
        let words = |voice: &str| SynthesisRequest {
            voice: Some(voice.to_owned()),
            output: crate::engine::OutputKind::AudioAndWords,
            ..SynthesisRequest::new("x")
        };
        assert!(caps.word_timestamps);
        assert_eq!(caps.check(&words("kestrel")), Ok(()));
        assert_eq!(caps.check(&words("vivian")), Err("word timestamps are not supported by alpha".to_owned()));
    }

    #[test]
    fn a_mix_of_one_engines_voices_goes_to_it_and_reaches_it_as_written() {
        let a = EngineCapabilities::new("hibari", 24_000).with_voices(["heart"]);
        let b = EngineCapabilities::new("kokoro", 24_000).with_voices(["af_bella", "af_sky"]).with_mixing(true);
        let engines = Engines::new(vec![Arc::new(Tone(a)), Arc::new(Tone(b))]).expect("two engines");
        let caps = engines.capabilities();
        for name in ["af_bella+af_sky", "AF_Bella(2) + af_sky(1)", "af_sky(0.5)+af_bella"] {
            assert_eq!(caps.resolve_voice(Some(name)), Ok(Some(name)), "{name}");
            let request = SynthesisRequest { voice: Some(name.to_owned()), ..SynthesisRequest::new("x") };
            assert_eq!(caps.route(&request), Some(1), "{name}");
            assert_eq!(caps.check(&request), Ok(()), "{name}");
        }
        assert_eq!(caps.mix("af_bella(2)+af_sky"), Some(vec![("af_bella", 2.0), ("af_sky", 1.0)]));
        // A part that is no voice, a voice that does not mix, two families, a bad weight.
        for name in
            ["af_bella+nobody", "heart+heart", "heart+af_sky", "af_bella(0)+af_sky", "af_bella()+af_sky", "+af_sky"]
        {
            assert!(caps.resolve_voice(Some(name)).is_err(), "{name}");
        }
    }

    #[test]
    fn kokoro_language_codes() {
        assert_eq!(crate::config::lang_code("a"), "en-US");
        assert_eq!(crate::config::lang_code("b"), "en-GB");
        assert_eq!(crate::config::lang_code("j"), "ja");
        assert_eq!(crate::config::lang_code("e"), "es-ES");
        assert_eq!(crate::config::lang_code("z"), "zh-CN");
        assert_eq!(crate::config::lang_code("en-gb"), "en-gb");
        assert_eq!(crate::config::lang_code("x"), "x");
    }
}
