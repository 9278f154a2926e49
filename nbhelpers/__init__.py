"""Helpers that make PyTorch's internals visible in the notebook series "PyTorch from the Inside".

Importing the package does nothing: no seeding, no threads, no downloads. Import the module for the
idea you need, e.g. ``from nbhelpers import devices, data``.

The map. Each module has one layer and imports only from its own layer and the layers listed before it
(tests/test_layers.py reads this table: a module missing from it, or an import against the order, fails;
"notebooks" lists those that import it, "all" being 00-13):

- foundation: what every other module may use; imports no other layer.
- record: plain data an instrument returns and a view draws (frozen dataclasses, no torch state).
- instrument: reads what torch does, on any model: never imports a lesson, a view or the exercises.
- view: draws records and graphs; never imports a lesson or the exercises.
- diagnosis: the package nbhelpers/diagnosis/ (its docstring maps its modules): every instrument on a learner's own
  model at once, and the ranked findings; may use the views.
- lesson: the series' own models, data, training loops and DDP workers; may use all of the above.
- exercises: the checked exercises at the end of each notebook; may use all of the above.
- tooling: the series' own machinery (running notebooks, the site, the CLI); no notebook imports it.

| module            | layer      | notebooks                  | what it is for                                       |
|-------------------|------------|----------------------------|------------------------------------------------------|
| devices           | foundation | all                        | picks CPU or CUDA; what this machine can run         |
| arguments         | foundation | -                          | the clear TypeError/ValueError of each entry point   |
| atomic            | foundation | -                          | writes a file so a crash leaves old or new, whole    |
| user_code         | foundation | -                          | the learner's line that is running, not torch's      |
| progress          | foundation | 05 07 11                   | one line a long call redraws in place; none stored   |
| compile_report    | record     | -                          | compile_lens's report: graphs, breaks, kernels       |
| storage           | instrument | 01                         | storages, views, strides, version counters, lifetimes |
| module_scope      | instrument | 02 09                      | which module is running, in forward and backward     |
| autograd_graph    | instrument | 02 08 12                   | a backward graph as data: nodes, saved tensors, order |
| forward_graph     | instrument | 02 12                      | the forward's ATen ops, shapes, and the node each made |
| memory            | instrument | 01 02 08                   | live bytes per op, module and phase; saved bytes     |
| memory_agreement  | instrument | 08                         | memory.track against torch's MemTracker, to the byte |
| modtracker_hooks  | instrument | -                          | what MemTracker's module hooks keep alive, and when  |
| eager_only        | instrument | 08                         | dispatch modes say when a compiled call ran eagerly  |
| profiling         | instrument | 09                         | profiler traces as data; FLOPs, bytes, regime        |
| node_times        | instrument | 09                         | a pass's time given to its nodes or ops, on its clock |
| flop_formulas     | instrument | -                          | FLOPs of the ops FlopCounterMode counts 0 (attention) |
| module_work       | instrument | -                          | FLOPs and bytes per module, against FlopCounterMode  |
| model_call        | instrument | -                          | a model's call as people pass it; its output's loss  |
| compilation       | instrument | 05 06 11                   | backends, their cost, graph breaks, recompiles       |
| compile_cache     | instrument | 05                         | what inductor's on-disk cache keeps                  |
| compile_lens      | instrument | 05 11                      | what torch.compile built: graphs, breaks, guards     |
| ddp_timeline      | instrument | 07                         | DDP's backward on every rank: ops and all-reduces    |
| stderr_capture    | instrument | 04 08 09                   | what C++ and child processes write to fd 2           |
| worker_probe      | instrument | 04                         | what happens inside a DataLoader worker              |
| graph_layout      | view       | 02                         | a layered drawing of any directed graph (+ its .js)  |
| edge_labels       | view       | -                          | where edge labels go: clear of boxes and each other  |
| graph_folds       | view       | 02                         | repeated blocks with the same graph, folded          |
| graph_boxes       | view       | -                          | a view's boxes: open modules, cut labels, the SVG    |
| graph_view        | view       | 02 05 09 10 11 12          | a clickable graph: JupyterLab, static site, SVG      |
| graph_diff        | view       | 02 11                      | two graphs, node by node                             |
| forward_view      | view       | -                          | a forward graph as view data, linked to its backward |
| compile_view      | view       | 05 10 11                   | compile_lens reports and exports as graph views      |
| memory_timeline   | view       | 13                         | bytes over a step, or a backward's time (+ .js)      |
| picture_canvas    | view       | -                          | SVG boxes, arrows, labels that fit, light and dark   |
| pictures          | view       | 03 04 06                   | pictures of live objects: float bits, parts, loaders |
| compile_picture   | view       | 05                         | the compile pipeline drawn with one run's counts     |
| diagnosis         | diagnosis  | 13                         | every lens on your model at once; ranked findings     |
| models            | lesson     | 02 03 05 06 07 08 09 10 12 | the sandwich model and the series' small models      |
| data              | lesson     | 00 03 04 06 07 10          | the offline handwritten digits, as torchvision MNIST |
| training          | lesson     | 03                         | a short loop: fit -> History, evaluate -> Evaluation |
| misclassification | lesson     | 03                         | a confusion matrix, the most confident mistakes      |
| loader_timing     | lesson     | 04                         | time to first batch and throughput per setup         |
| mixed_precision   | lesson     | 06                         | autocast op by op, loss scaling, measured            |
| saving            | lesson     | 10                         | checkpoints a crash cannot break                     |
| distributed       | lesson     | 07                         | a function in N processes joined by a group          |
| ddp_workers       | lesson     | 07 12                      | the function each rank runs in the DDP lessons       |
| ddp_train         | lesson     | 07                         | the torchrun entry point: DDP training               |
| planted_models    | lesson     | 13                         | small models with one planted problem each           |
| exercises         | exercises  | all                        | the checked exercises, one module per idea           |
| __main__          | tooling    | -                          | python -m nbhelpers doctor / execute / html / diagnose |
| _tools            | tooling    | -                          | runs notebooks, builds the site, make trace          |
"""
__all__: list[str] = []
__version__ = "0.1.0"
