"""The bad-input corpus at the one speech job (serving/jobs.py `SpeechJobs.prepare`), which every door calls: each
text and each bad value of a field the job checks is refused there with the corpus's code and words, or passes,
once, without a door. The door files (test_bad_input_rest.py, _ui.py, _cli.py) run the same cases through their
own parsing and check how each door shows the job's answer.

A fake engine stands for the tiny SFT model (the same speakers and modes): `prepare` loads nothing."""

from __future__ import annotations


import pytest

from cosyvoice_ui.errors import InvalidRequest
from cosyvoice_ui.serving.jobs import SpeechJobs
from cosyvoice_ui.serving.manager import ModelManager
from cosyvoice_ui.settings import Settings
from cosyvoice_ui.testing.fakes import FakeEngine
from cosyvoice_ui.types import Mode, SynthesisRequest

from .corpus import SPEAKER, TEXT_CASES, VALID_TEXT, VALUE_CASES, Refusal, TextCase, ValueCase

# The job's own code for a bad value of a field it checks (a value a door cannot even parse, such as a speed
# written as a word, never reaches the job: the door files hold those).
JOB_CODES = {"speaker_unknown", "voice_unknown", "mode_unsupported", "speed_out_of_range", "seed_out_of_range"}
JOB_CASES = [case for case in VALUE_CASES if set(case.codes.values()) & JOB_CODES]
# Text the job passes and the model's own frontend refuses when it reads it (nothing left to speak): the door files
# check those, on the tiny model.
ENGINE_CODES = {"text_unspeakable"}
JOB_TEXT_CASES = [case for case in TEXT_CASES if case.expect is None or case.expect.code not in ENGINE_CODES]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> SpeechJobs:
    work = tmp_path_factory.mktemp("job-corpus")
    engine = FakeEngine(name="tiny-sft", modes=(Mode.SFT, Mode.ZERO_SHOT, Mode.CROSS_LINGUAL, Mode.VC),
                        speakers=("中文女", "中文男", "英文女", "英文男", "日语男", "粤语女", "韩语女"), sample_rate=22050)
    manager = ModelManager("tiny-sft", loader=lambda model_id, options, progress: engine, idle_unload_s=0,
                           describe_model=lambda model_id: engine.info)
    settings = Settings(voices_dir=work / "voices", glossary_dir=work / "glossaries", idle_unload_s=0)
    return SpeechJobs(manager, settings)


def prepare(jobs: SpeechJobs, request: SynthesisRequest):
    return jobs.prepare(request, info=jobs.manager.info())


def refused(jobs: SpeechJobs, request: SynthesisRequest) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as info:
        prepare(jobs, request)
    return info.value


@pytest.mark.parametrize("case", JOB_TEXT_CASES, ids=lambda c: c.id)
def test_text(jobs: SpeechJobs, case: TextCase) -> None:
    request = SynthesisRequest(Mode.SFT, text=case.text, speaker=SPEAKER)
    if case.expect is None:
        job = prepare(jobs, request)
        assert job.request.mode is Mode.SFT and job.request.seed is not None and job.original_text == case.text
    else:
        error = refused(jobs, request)
        case.expect.check(error.code, str(error))


def value_request(case: ValueCase) -> SynthesisRequest:
    if case.field == "speaker":
        return SynthesisRequest(Mode.SFT, text=VALID_TEXT, speaker=case.value)
    if case.field == "voice":  # a saved voice is named as the speaker of a clone
        return SynthesisRequest(Mode.ZERO_SHOT, text=VALID_TEXT, speaker=case.value)
    if case.field == "mode":
        return SynthesisRequest(Mode(case.value), text=VALID_TEXT, speaker=SPEAKER, instruct_text="A calm voice.")
    return SynthesisRequest(Mode.SFT, text=VALID_TEXT, speaker=SPEAKER, **{case.field: case.value})


@pytest.mark.parametrize("case", JOB_CASES, ids=lambda c: c.id)
def test_bad_values(jobs: SpeechJobs, case: ValueCase) -> None:
    error = refused(jobs, value_request(case))
    [code] = set(case.codes.values()) & JOB_CODES  # every door that reaches the job answers with its code
    Refusal(code, case.words).check(error.code, str(error))


def test_the_corpus_reaches_every_code_the_job_checks() -> None:
    assert {code for case in JOB_CASES for code in case.codes.values()} & JOB_CODES == JOB_CODES
    assert any(case.expect is None for case in JOB_TEXT_CASES) and any(case.expect for case in JOB_TEXT_CASES)
