"""A party's attack read once from the config (silo/attack.py): the scale of its upload and the rows its class
payload leaves off, honest for a party the config does not list."""
from types import SimpleNamespace

from fedmpi.silo.attack import PartyAttack, party_attack


def test_a_listed_party_s_attack_and_an_unlisted_party_s_honesty():
    cfg = SimpleNamespace(parties=[SimpleNamespace(name="a", attack=None),
                                   SimpleNamespace(name="b", attack=SimpleNamespace(scale=-1.0, short_rows=3))])
    assert party_attack(cfg, "b") == PartyAttack(scale=-1.0, short_rows=3)
    assert party_attack(cfg, "a") == party_attack(cfg, "union") == PartyAttack(scale=1.0, short_rows=0)
