"""A device client's identity from its reconstructions (fedmpi/audit/identity.py), on planted templates: the
reconstructions' template accepted against the client's and closest to it; one that matches another identity is
neither, and counts as accepting that other identity's template."""
import torch

from fedmpi.audit.identity import one_client

TEMPLATES = {0: torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64), 1: torch.tensor([0.0, 1.0, 0.0],
                                                                                   dtype=torch.float64),
             2: torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)}
NEAR_0 = torch.tensor([[1.0, 0.1, 0.0], [1.0, -0.1, 0.0]], dtype=torch.float64)   # template (1, 0, 0)


def test_reconstructions_of_client_0_recover_it_and_no_other():
    assert one_client(NEAR_0, 0, TEMPLATES, 0.5) == {"recovered": True, "top1": True, "images_recovered": 1.0,
                                                     "others_accepted": 0.0, "chance": 0.0}
    assert one_client(NEAR_0, 1, TEMPLATES, 0.5) == {"recovered": False, "top1": False, "images_recovered": 0.0,
                                                     "others_accepted": 0.5, "chance": 0.0}


def test_a_threshold_every_template_passes_is_chance_one():
    assert one_client(NEAR_0, 0, TEMPLATES, -1.0)["chance"] == 1.0
