"""The runner, the analyzer and the applier as a model behind an OpenAI-compatible Chat Completions API
(`kind: llm`): in-process, over the official `openai` SDK, with retries, repairs and measured usage.

    client     LlmClient: one step's AsyncOpenAI, retries (tenacity) and error translation
    errors     the LlmStepError tree
    session    a step's calls: kept as prompt-<n>.md / answer-<n>.json, usage summed and priced
    prompts    the templates (prompts/*.md) and bounded views of folders for them
    analyzer   LlmAnalyzer: Feedback JSON, one repair round
    edits      EditPlan: the edits an applier answers, made all or none inside the worktree
    applier    LlmApplier: EditPlan JSON, one repair round
    runner     LlmRunner: a single-prompt agent, its plain-text answer
"""

from workers.adapters.llm.analyzer import LlmAnalyzer
from workers.adapters.llm.applier import LlmApplier
from workers.adapters.llm.runner import LlmRunner

__all__ = ["LlmAnalyzer", "LlmApplier", "LlmRunner"]
