"""The LLM judge: many judgements at once, cached, retried, counted, audited.

A benchmark asks a judge model to rate model outputs. It builds one ``JudgeRequest`` per output
(an id and chat messages) and reads the answers with its ``Rubric`` (a rating parser
and a score scale); ``Judge.run`` answers from the cache what it can, sends the rest concurrently
with retries, and returns one ``Judgement`` per request (failed ones counted, never averaged in),
writing an audit trail. API keys are read from the environment variable *named* in the settings;
they never reach the cache, the audit trail or a log line.

Modules, in the shape of lmms-eval's ``lmms_eval/llm_judge`` (none of them imports lmms-eval or a
benchmark):

* ``protocol``: the data that crosses boundaries (requests, decoding, completions, judgements, errors);
* ``settings``: ``JudgeSettings``, which every judged benchmark's settings inherit, and their check;
* ``base``: what a backend implements; ``providers``: any OpenAI-compatible server (OpenAI, Azure
  OpenAI, vLLM, SGLang) and an in-process transformers model; ``factory``: the backend settings name;
* ``cache``: the SQLite cache of answers; ``engine``: ``Judge``;
* ``rubrics``: rubrics, found by name among those a reader is handed, the judged items tasks log, and their scores;
* ``identity``: ``JudgeIdentity``, what judged a run, whole (model, revision, snapshot, prompt, rubric);
* ``retirements``: the judge models their provider shut down or will (package data), and what to say;
* ``agreement``: how far two judges' ratings of the same answers agree (weighted kappa, intervals).

Inside the harnesses, a judged task's adapter holds a ``lmms_egoplan.harness.judged.Judging``;
``lmms-egoplan rejudge`` uses it to re-score logged model outputs with another judge.

The package exports nothing: each name is imported from the module that defines it (``from
lmms_egoplan.judge.engine import Judge``), so that go-to-definition follows every import and lmms-eval's load of
the suite's entry point, which needs no judge, loads none of them.
"""
