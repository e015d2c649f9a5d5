"""The mechanisms: randomized response and Huber corruption on binary labels (``binary``), the label-DP toolkit
beyond them (``label_dp``: RRWithPrior, K-RR, the subset mechanism), the same as measurements that a release runs
(``measurements``), and the flip rate and c(ε) that debiasing needs (``calibration``)."""
