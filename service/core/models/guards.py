"""The guards that cost no run (`guards:` of a tuning file; docs/guards.md): checks on a candidate's
instructions, made before its gate evaluates it (service.kinds.evals.guards)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt


class GuardsConfig(BaseModel):
    """Which guards a tuning's candidates must pass, and their limits (unset: that guard is off)."""

    model_config = ConfigDict(extra="forbid")

    leak_min_words: int | None = Field(
        default=8,
        ge=4,
        le=200,
        description="leak: a candidate whose new text shares a run of at least this many words with a "
        "case's input or rubric (case and spacing aside) is rejected. Held-out cases always; training cases "
        "unless `leak_training` is off. Unset: no leak guard.",
    )
    leak_training: bool = Field(
        default=True, description="leak: check the training cases too, not only the held-out ones."
    )
    system_max_tokens: int | None = Field(
        default=None, ge=1, description="size: the most estimated tokens a candidate's instructions may hold."
    )
    edit_max_growth_tokens: int | None = Field(
        default=None, ge=1, description="size: the most estimated tokens one apply may add."
    )
    edit_max_removed: float | None = Field(
        default=0.5,
        gt=0,
        le=1,
        description="collapse: the largest share of the instructions' estimated tokens one apply may remove "
        "(net). Unset: any shrink is allowed.",
    )


class SizeBudget(BaseModel):
    """The size budgets an applier is told (its brief; `in/budget.json` for a command applier): the
    instructions' estimated tokens now and what the `size` and `collapse` guards allow one apply."""

    model_config = ConfigDict(extra="forbid")

    tokens_now: NonNegativeInt = Field(description="The current version's estimated tokens.")
    system_max_tokens: int | None = Field(default=None, description="The most the instructions may hold.")
    edit_max_growth_tokens: int | None = Field(default=None, description="The most one apply may add.")
    edit_max_removed_tokens: int | None = Field(default=None, description="The most one apply may remove.")

    def brief(self) -> str:
        """The budgets in a sentence or two, for a model's prompt."""
        parts = [f"The instructions hold about {self.tokens_now} tokens now."]
        if self.system_max_tokens is not None:
            parts.append(f"They may hold at most {self.system_max_tokens} tokens.")
        if self.edit_max_growth_tokens is not None:
            parts.append(f"This edit may add at most {self.edit_max_growth_tokens} tokens.")
        if self.edit_max_removed_tokens is not None:
            parts.append(f"It may remove at most {self.edit_max_removed_tokens} tokens.")
        parts.append("An edit past a limit is rejected unpublished.")
        return " ".join(parts)

    @classmethod
    def of(cls, config: GuardsConfig, tokens_now: int) -> SizeBudget:
        removed = config.edit_max_removed
        return cls(
            tokens_now=tokens_now,
            system_max_tokens=config.system_max_tokens,
            edit_max_growth_tokens=config.edit_max_growth_tokens,
            edit_max_removed_tokens=None if removed is None else int(removed * tokens_now),
        )
