"""Questions asked of a model: head importance, head statistics, evaluation."""
