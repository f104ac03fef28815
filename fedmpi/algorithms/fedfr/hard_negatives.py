"""FedFR's hard negatives (spec §4.3-1): the public images the party's identities are most easily confused with,
chosen afresh each round with the global backbone Θ it received.

  L = f̂ of every local training image (no flip), Pub = f̂ of every public image, both under Θ (eval mode);
  H_k = { j : max_i L_i · Pub_j > threshold }   (strict: a public image at exactly the threshold is not chosen)

One pass over the party's and the public images per round, on the party's ranks: rank q of R embeds images q, q+R,
... of each set; the local features are gathered on every rank ([n_k images, d]), the public ones are reduced to
their best cosine a batch at a time as they are embedded, so the pass holds L, one batch and one value per public
image ([m]) whatever the public set's size. The authors' server embeds the public set once per round for all
clients; every party holding Θ and the public set computes the same features."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from fedmpi.metrics.embed import set_batches


def best_cosines(local: torch.Tensor, public: torch.Tensor) -> torch.Tensor:
    """max_i L_i · Pub_j for each public row j ([m]); rows already unit."""
    if local.shape[0] == 0:
        return public.new_full((public.shape[0],), -float("inf"))
    return (public @ local.T).max(dim=1).values


def chosen(best: torch.Tensor, threshold: float) -> torch.Tensor:
    """The public images whose best cosine is strictly above the threshold (bool [m])."""
    return best > threshold


def embed(backbone, dataset, indices, batch: int, prepare, device, dtype):
    """Unit embeddings of dataset items `indices` (no flip), `batch` at a time, yielded as (positions, features)."""
    for part, images in set_batches(dataset, indices, batch):
        yield part, F.normalize(backbone(prepare(images.to(device=device, dtype=dtype))).to(dtype), dim=1)


def hard_negative_pass(backbone, local_set, public_set, threshold: float, party) -> np.ndarray:
    """The indices of the public set's hard negatives (sorted), the same on every rank of the party (`party`: its
    PartyTraining). The backbone is evaluated in eval mode and left in the mode it was in."""
    was_training = backbone.training
    backbone.eval()
    together = party.collectives
    q, R = together.rank, together.ranks
    with torch.no_grad():
        mine = np.arange(q, len(local_set), R)
        parts = [f for _, f in embed(backbone, local_set, mine, party.eval_batch, party.prepare_images,
                                     party.device, party.dtype)]
        empty = torch.empty(0, backbone.embedding_size, device=party.device, dtype=party.dtype)
        local = together.gather_rows(torch.cat(parts) if parts else empty)
        theirs = np.arange(q, len(public_set), R)
        best = torch.empty(len(theirs), device=party.device, dtype=party.dtype)
        for part, features in embed(backbone, public_set, theirs, party.eval_batch, party.prepare_images,
                                    party.device, party.dtype):
            at = (part - q) // R
            best[at[0]:at[-1] + 1] = best_cosines(local, features)
        index = together.gather_rows(torch.as_tensor(theirs, device=party.device))
        best = together.gather_rows(best)
    backbone.train(was_training)
    return np.sort(index[chosen(best, threshold)].cpu().numpy())
