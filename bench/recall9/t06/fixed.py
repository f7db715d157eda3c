# Repository: https://github.com/mosaicml/composer
# Commit (fix): 8b97266c2f4122147dd73c125411f3a5249aec1c (PR #334); before: 699c557ab90bfd92147cd8ca2b85b6c72ae342cd
# Files excerpted: composer/trainer/checkpoint.py (CheckpointLoader._retrieve_checkpoint,
#                  _get_node_checkpoint_download_folder, _download_checkpoint, load_checkpoint)
from __future__ import annotations

import contextlib
import logging
import os
import tarfile
import tempfile
import urllib.parse
from typing import Optional, Tuple

import requests
import torch

from composer.core import State
from composer.utils import dist

log = logging.getLogger(__name__)

_MOSAIC_STATES_FILENAME = "mosaic_states.pt"


class CheckpointLoader:
    def _retrieve_checkpoint(self, rank: int, destination_filepath: str, ignore_not_found_errors: bool):
        checkpoint_name = self.path.format(RANK=rank)
        if self.object_store is not None:
            provider = self.object_store.initialize_object()
            try:
                total_size_in_bytes = provider.get_object_size(checkpoint_name)
            except Exception as e:
                if "ObjectDoesNotExistError" in str(e) and ignore_not_found_errors:
                    return
                raise
            self._write_to_file_with_pbar(
                destination_filepath=destination_filepath,
                total_size=total_size_in_bytes,
                iterator=provider.download_object_as_stream(checkpoint_name, chunk_size=self.chunk_size),
            )
            return
        checkpoint_uri_parsed = urllib.parse.urlparse(checkpoint_name)

        if checkpoint_uri_parsed.scheme == "":
            # assume it's a local file
            os.symlink(os.path.abspath(checkpoint_name), destination_filepath)
            return
        # it's a url
        with requests.get(checkpoint_name, stream=True) as r:
            r.raise_for_status()
            total_size_in_bytes = r.headers.get('content-length')
            if total_size_in_bytes is not None:
                total_size_in_bytes = int(total_size_in_bytes)
            self._write_to_file_with_pbar(destination_filepath,
                                          total_size=total_size_in_bytes,
                                          iterator=r.iter_content(self.chunk_size))

    def _get_node_checkpoint_download_folder(self, path: Optional[str]) -> str:
        """Broadcasts the path from the local rank zero to all ranks"""
        local_rank_zero = dist.get_local_world_size() * dist.get_node_rank()
        paths = dist.all_gather_object(path)
        local_rank_zero_path = paths[local_rank_zero]
        assert local_rank_zero_path is not None, "local rank zero provides the path"
        return local_rank_zero_path

    def _download_checkpoint(self, node_checkpoint_folder: str) -> Tuple[str, Optional[str]]:
        checkpoint_archive_name = self.path.split(os.path.sep)[-1]
        rank_zero_checkpoint_archive_name = "rank_0." + checkpoint_archive_name.format(rank=0)
        rank_n_checkpoint_archive_name = f"rank_{dist.get_global_rank()}." + checkpoint_archive_name.format(
            rank=dist.get_global_rank())
        rank_zero_checkpoint_archive_filepath = os.path.join(node_checkpoint_folder, rank_zero_checkpoint_archive_name)
        rank_n_checkpoint_archive_filepath = os.path.join(node_checkpoint_folder, rank_n_checkpoint_archive_name)
        extracted_checkpoint_folder = None
        if rank_zero_checkpoint_archive_filepath.endswith(".pt"):
            # it's not an archive; it's just the mosaic state dict
            # and only rank zero has this file
            extracted_checkpoint_folder = None
            mosaic_checkpoint_filepath = rank_zero_checkpoint_archive_filepath
        else:
            extracted_checkpoint_folder = os.path.join(node_checkpoint_folder, "checkpoint")
            mosaic_checkpoint_filepath = os.path.join(extracted_checkpoint_folder, _MOSAIC_STATES_FILENAME)

        try:
            if dist.get_local_rank() == 0:
                # every NODE needs the GLOBAL rank zero checkpoint
                self._retrieve_checkpoint(destination_filepath=rank_zero_checkpoint_archive_filepath,
                                          rank=dist.get_global_rank(),
                                          ignore_not_found_errors=False)
                if extracted_checkpoint_folder is not None:
                    try:
                        with tarfile.open(rank_zero_checkpoint_archive_filepath) as tarball:
                            tarball.extractall(extracted_checkpoint_folder)
                    except FileNotFoundError:
                        checkpoint_name = self.path.format(rank=dist.get_global_rank())
                        # Not re-raising the file-not-found error as that is irrelevant;
                        # the underlying issue is that the checkpoint file does not exist on the disk
                        # or could not be downloaded
                        raise RuntimeError(f"Checkpoint {checkpoint_name} does not exist")

            if rank_zero_checkpoint_archive_filepath != rank_n_checkpoint_archive_filepath:
                # every RANK needs ITS OWN checkpoint.
                # But, the  global rank zero is a special case -- these files are the same!
                assert dist.get_global_rank() != 0, "invariant violation"

                # Allowing not-found errors to be ignored as sometimes there won't be rank-local checkpoints
                # (e.g. when not using deepspeed)
                self._retrieve_checkpoint(destination_filepath=rank_n_checkpoint_archive_filepath,
                                          rank=dist.get_global_rank(),
                                          ignore_not_found_errors=True)

                if extracted_checkpoint_folder is not None:
                    # it's an archive and needs to be extracted
                    with tarfile.open(rank_n_checkpoint_archive_filepath) as tarball:
                        tarball.extractall(extracted_checkpoint_folder)
        finally:
            # Wait for all checkpoints on the node to finish downloading
            # Putting the barrier in a finally so the rank will always block on the barrier,
            # even if it has an exception.
            # Any exception will be re-raised after the barrier passes. The launcher script
            # will detect the process crash and terminate the other ranks
            dist.barrier()

        return mosaic_checkpoint_filepath, extracted_checkpoint_folder

    def load_checkpoint(self, state: State):
        # download the checkpoint to the node-local folder
        tempdir_ctx = tempfile.TemporaryDirectory() if dist.get_local_rank() == 0 else contextlib.nullcontext(None)
        with tempdir_ctx as tempdir:
            node_checkpoint_folder = self._get_node_checkpoint_download_folder(tempdir)
            mosaic_checkpoint_filepath, extracted_checkpoint_folder = self._download_checkpoint(node_checkpoint_folder)
            seed_to_restore = self._restore_checkpoint(state, mosaic_checkpoint_filepath, extracted_checkpoint_folder)

        log.info(f'{"Model weights" if self.load_weights_only else "Trainer checkpoint"}'
                 f' loaded from {self.path}.')

        return seed_to_restore
