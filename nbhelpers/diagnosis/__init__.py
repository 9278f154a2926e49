"""The diagnosis: one step of a learner's own model under every instrument of the series at once, each number
checked against PyTorch's own tool, and what matters first ranked as findings. A framework of its own on top of
the instruments and views, so it lives apart from them; notebooks import its modules by name:

    from nbhelpers.diagnosis import diagnose
    d = diagnose.run(model, x, target=y)

Importing the package does nothing (it imports none of its modules). Its modules, in the order data flows:

- diagnose: `run` and the `Diagnosis` it returns; puts back everything the step changed.
- lenses: each lens run once on the step, timed, a failing lens recorded with why; `measure` -> `Measured`.
- step: the step every lens runs: forward, loss, backward, optimizer; at another batch size; under memory.track.
- measured: what the lenses measured, as frozen records: `Measured` (one typed field per lens), `Agreement`, ...
- leaks: what a step leaves to the next (growth, and what holds it), and the model's containers put back.
- findings: `rank`: the findings from the model's state and what was measured, most important first.
- memory_findings: the findings about memory: the peak, a saved tensor, a block to checkpoint, a leak.
- compile_findings: the findings about torch.compile and torch.export: graph breaks, recompiles, failed exports.
- rank: a finding, its measured cost, the order of the tiers, one finding per cause.
- fixes: what each finding says to change, as code.
- view: a diagnosis as text, a widget, an offline page (nbhelpers/report_page.html and .js are its shell).

The instruments it reads with are the package's own (memory, autograd_graph, forward_graph, module_scope,
user_code, compile_lens, ...): a measuring helper belongs to its instrument, not here.
"""
__all__: list[str] = []
