"""The runner, the analyzer and the applier as a model behind an OpenAI-compatible Chat Completions API
(`kind: llm`): in-process, over the official `openai` SDK, with retries, repairs and measured usage.

    pool       Providers: the worker's pool of providers (light: the SDK loads with the first provider)
    provider   Provider: per provider one reused client, its limits, its format
    limits     ProviderLimits: fleet-wide permits (adaptive on 429) and tokens per minute, in Redis
    formats    structured output negotiated per provider, remembered in the worker and in Redis
    client     LlmClient: one call with retries (tenacity), error translation, timeouts told from outages
    tokens     Meter and Estimator: every attempt's tokens, measured or estimated, and their price
    errors     the LlmStepError tree
    session    a step's calls: kept as prompt-<n>.md / answer-<n>.json, usage summed and priced
    prompts    the templates (prompts/*.md) and bounded views of folders for them
    grading    the case's own Feedback schema, and the checks of an answer against it
    analyzer   LlmAnalyzer: Feedback JSON, one repair round
    edits      EditPlan: the edits an applier answers, made all or none inside the worktree
    applier    LlmApplier: EditPlan JSON, one repair round
    runner     LlmRunner: a single-prompt agent, its plain-text answer
"""
