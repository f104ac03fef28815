"""What an honest-but-curious server can learn from what it receives: the attacks and measures of a privacy
audit as pure functions (no MPI, no run folder). analytic.py recovers an FC layer's input [Phong et al. 2018]
and a single example's label [iDLG]; inversion.py optimises inputs whose gradient or local update matches an
observed one [Geiping et al. 2020]; scoring.py scores reconstructions (PSNR, SSIM, identity at a FAR);
templates.py re-identifies uploaded class rows; membership.py runs identity membership inference and the
(ε, δ)-DP bound on it [Kairouz, Oh, Viswanath 2015]."""
