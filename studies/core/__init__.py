"""The core study: what each rank's DataLoader receives from the stock sampler and ours.

A :class:`~studies.core.cases.Case` (a sampler and its settings over a dataset, world and
batch size) is run in-process, one DataLoader per rank built as a user builds it
(:mod:`~studies.core.simulate`). Its tidy rows are reduced to one row of the numbers that
matter (:mod:`~studies.core.summary`; the same row computed from the sampler's plan for
any dataset size: :mod:`~studies.core.plan_summary`), its memory per rank is computed from
the sizes (:mod:`~studies.core.sampler_memory`), and it is judged for a training or an
evaluation loop (:mod:`~studies.core.verdicts`); :mod:`~studies.core.tables` writes the
rows as CSV or JSON. :mod:`~studies.core.evaluation` is the synthetic model whose exact
accuracy is known, and :mod:`~studies.core.blog_post` the blog post's printed output that
the shared experiment is compared with.
"""
