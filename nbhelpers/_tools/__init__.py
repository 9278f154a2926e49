"""The series' own tooling, not for learners: executing notebooks and building the offline site
(`notebook_tools`, behind `python -m nbhelpers execute|html`), and running notebook 05's compile examples for
`make trace` (`trace_examples`). No notebook imports these."""
