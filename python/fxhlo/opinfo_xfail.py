"""The OpInfo samples fxhlo is known to fail (python -m fxhlo.opinfo; docs/opinfo.md).

``XFAIL[(opinfo, mode)] = reason``: some counted sample of that OpInfo in that mode does not
pass (unsupported op, compile error, mismatch or crash); ``XFAIL_SAMPLES`` names the samples.
python/tests/test_opinfo.py fails on a failure not listed here and on a listed pair whose
listed samples ran and all passed, so the list only shrinks.  ``python -m fxhlo.opinfo
--check-xfail`` checks it against a full run; ``--write-xfail`` rewrites it from one.
"""

from typing import Dict, Tuple

XFAIL: Dict[Tuple[str, str], str] = {
    ('_segment_reduce.lengths', 'fwdbwd-f32'):
        'unsupported: aten._segment_reduce_backward.default',
    ('_segment_reduce.offsets', 'fwdbwd-f32'):
        'unsupported: aten._segment_reduce_backward.default',
    ('_upsample_bilinear2d_aa', 'fwd-f32'):
        'unsupported: aten._upsample_bilinear2d_aa.default',
    ('_upsample_bilinear2d_aa', 'fwdbwd-f32'):
        'unsupported: aten._upsample_bilinear2d_aa.default',
    ('argwhere', 'fwd-f32'):
        'unsupported: aten.nonzero.default, aten.sym_size.int, ge, le',
    ('argwhere', 'fwd-bf16'):
        'unsupported: aten.nonzero.default, aten.sym_size.int, ge, le',
    ('cdist', 'fwdbwd-f32'):
        'unsupported: aten._cdist_backward.default',
    ('cdouble', 'fwd-f32'):
        'unsupported: aten._to_copy.default (torch.complex128)',
    ('cdouble', 'fwdbwd-f32'):
        'unsupported: aten._to_copy.default (torch.complex128)',
    ('cdouble', 'fwd-bf16'):
        'unsupported: aten._to_copy.default (torch.complex128)',
    ('cfloat', 'fwd-f32'):
        'unsupported: aten._to_copy.default (torch.complex64)',
    ('cfloat', 'fwdbwd-f32'):
        'unsupported: aten._to_copy.default (torch.complex64)',
    ('cfloat', 'fwd-bf16'):
        'unsupported: aten._to_copy.default (torch.complex64)',
    ('chalf', 'fwd-f32'):
        'unsupported: aten._to_copy.default (torch.complex32)',
    ('chalf', 'fwdbwd-f32'):
        'unsupported: aten._to_copy.default (torch.complex32)',
    ('chalf', 'fwd-bf16'):
        'unsupported: aten._to_copy.default (torch.complex32)',
    ('complex', 'fwd-f32'):
        'unsupported: aten.complex.default',
    ('complex', 'fwdbwd-f32'):
        'unsupported: aten.complex.default',
    ('fft.fft', 'fwd-f32'):
        'unsupported: aten._fft_r2c.default',
    ('fft.fft', 'fwdbwd-f32'):
        'unsupported: aten._fft_r2c.default',
    ('fft.fft2', 'fwd-f32'):
        'unsupported: aten._fft_c2c.default, aten._to_copy.default (torch.complex64), aten.constant_pad_nd.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.fft2', 'fwdbwd-f32'):
        'unsupported: aten._fft_c2c.default, aten._to_copy.default (torch.complex64), aten.constant_pad_nd.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.fftn', 'fwd-f32'):
        'unsupported: aten._fft_c2c.default, aten._to_copy.default (torch.complex64), aten.constant_pad_nd.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.fftn', 'fwdbwd-f32'):
        'unsupported: aten._fft_c2c.default, aten._to_copy.default (torch.complex64), aten.constant_pad_nd.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.hfft', 'fwd-f32'):
        'unsupported: aten._conj.default, aten._fft_c2r.default, aten._to_copy.default (torch.complex64), aten.clone.default (torch.complex64)',
    ('fft.hfft', 'fwdbwd-f32'):
        'unsupported: aten._conj.default, aten._fft_c2r.default, aten._to_copy.default (torch.complex64), aten.clone.default (torch.complex64)',
    ('fft.hfft2', 'fwd-f32'):
        'unsupported: aten._conj.default, aten._fft_c2c.default, aten._fft_c2r.default, aten._to_copy.default (torch.complex64), aten.clone.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.hfft2', 'fwdbwd-f32'):
        'unsupported: aten._conj.default, aten._fft_c2c.default, aten._fft_c2r.default, aten._to_copy.default (torch.complex64), aten.clone.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.hfftn', 'fwd-f32'):
        'unsupported: aten._conj.default, aten._fft_c2c.default, aten._fft_c2r.default, aten._to_copy.default (torch.complex64), aten.clone.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.hfftn', 'fwdbwd-f32'):
        'unsupported: aten._conj.default, aten._fft_c2c.default, aten._fft_c2r.default, aten._to_copy.default (torch.complex64), aten.clone.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.ifft', 'fwd-f32'):
        'unsupported: aten._conj.default, aten._fft_r2c.default',
    ('fft.ifft', 'fwdbwd-f32'):
        'unsupported: aten._conj.default, aten._fft_r2c.default',
    ('fft.ifft2', 'fwd-f32'):
        'unsupported: aten._fft_c2c.default, aten._to_copy.default (torch.complex64), aten.constant_pad_nd.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.ifft2', 'fwdbwd-f32'):
        'unsupported: aten._fft_c2c.default, aten._to_copy.default (torch.complex64), aten.constant_pad_nd.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.ifftn', 'fwd-f32'):
        'unsupported: aten._fft_c2c.default, aten._to_copy.default (torch.complex64), aten.constant_pad_nd.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.ifftn', 'fwdbwd-f32'):
        'unsupported: aten._fft_c2c.default, aten._to_copy.default (torch.complex64), aten.constant_pad_nd.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.ihfft', 'fwd-f32'):
        'unsupported: aten._conj.default, aten._fft_r2c.default',
    ('fft.ihfft', 'fwdbwd-f32'):
        'unsupported: aten._conj.default, aten._fft_r2c.default',
    ('fft.ihfft2', 'fwd-f32'):
        'unsupported: aten._conj_physical.default, aten._fft_c2c.default, aten._fft_r2c.default',
    ('fft.ihfft2', 'fwdbwd-f32'):
        'unsupported: aten._conj_physical.default, aten._fft_c2c.default, aten._fft_r2c.default',
    ('fft.ihfftn', 'fwd-f32'):
        'unsupported: aten._conj_physical.default, aten._fft_c2c.default, aten._fft_r2c.default',
    ('fft.ihfftn', 'fwdbwd-f32'):
        'unsupported: aten._conj_physical.default, aten._fft_c2c.default, aten._fft_r2c.default',
    ('fft.irfft', 'fwd-f32'):
        'unsupported: aten._fft_c2r.default, aten._to_copy.default (torch.complex64)',
    ('fft.irfft', 'fwdbwd-f32'):
        'unsupported: aten._fft_c2r.default, aten._to_copy.default (torch.complex64)',
    ('fft.irfft2', 'fwd-f32'):
        'unsupported: aten._fft_c2r.default, aten._to_copy.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.irfft2', 'fwdbwd-f32'):
        'unsupported: aten._fft_c2r.default, aten._to_copy.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.irfftn', 'fwd-f32'):
        'unsupported: aten._fft_c2r.default, aten._to_copy.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.irfftn', 'fwdbwd-f32'):
        'unsupported: aten._fft_c2r.default, aten._to_copy.default (torch.complex64), aten.slice.Tensor (torch.complex64)',
    ('fft.rfft', 'fwd-f32'):
        'unsupported: aten._fft_r2c.default',
    ('fft.rfft', 'fwdbwd-f32'):
        'unsupported: aten._fft_r2c.default',
    ('fft.rfft2', 'fwd-f32'):
        'unsupported: aten._fft_r2c.default',
    ('fft.rfft2', 'fwdbwd-f32'):
        'unsupported: aten._fft_r2c.default',
    ('fft.rfftn', 'fwd-f32'):
        'unsupported: aten._fft_r2c.default',
    ('fft.rfftn', 'fwdbwd-f32'):
        'unsupported: aten._fft_r2c.default',
    ('geqrf', 'fwd-f32'):
        'unsupported: aten.geqrf.default',
    ('grid_sampler_2d', 'fwdbwd-f32'):
        'unsupported: aten.grid_sampler_2d_backward.default',
    ('grid_sampler_3d', 'fwd-f32'):
        'unsupported: aten.grid_sampler_3d.default',
    ('grid_sampler_3d', 'fwdbwd-f32'):
        'unsupported: aten.grid_sampler_3d.default',
    ('grid_sampler_3d', 'fwd-bf16'):
        'unsupported: aten.grid_sampler_3d.default',
    ('hash_tensor', 'fwd-f32'):
        'unsupported: aten.hash_tensor.default',
    ('hash_tensor', 'fwd-bf16'):
        'unsupported: aten.hash_tensor.default',
    ('histogram', 'fwd-f32'):
        'unsupported: aten.histogram.bin_ct',
    ('histogramdd', 'fwd-f32'):
        'unsupported: aten._histogramdd_bin_edges.default, aten._histogramdd_from_bin_cts.default',
    ('linalg.cholesky', 'fwd-f32'):
        'unsupported: aten.linalg_cholesky_ex.default, with_effects',
    ('linalg.cholesky', 'fwdbwd-f32'):
        'unsupported: aten.linalg_cholesky_ex.default, with_effects',
    ('linalg.cholesky_ex', 'fwd-f32'):
        'unsupported: aten.linalg_cholesky_ex.default',
    ('linalg.cholesky_ex', 'fwdbwd-f32'):
        'unsupported: aten.linalg_cholesky_ex.default',
    ('linalg.cond', 'fwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('linalg.cond', 'fwdbwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('linalg.det', 'fwd-f32'):
        'unsupported: aten._linalg_det.default',
    ('linalg.det', 'fwdbwd-f32'):
        'unsupported: aten._linalg_det.default',
    ('linalg.eig', 'fwd-f32'):
        'unsupported: aten.linalg_eig.default',
    ('linalg.eigh', 'fwd-f32'):
        'unsupported: aten._linalg_eigh.default',
    ('linalg.eigh', 'fwdbwd-f32'):
        'unsupported: aten._linalg_eigh.default',
    ('linalg.eigvals', 'fwd-f32'):
        'unsupported: aten.linalg_eig.default',
    ('linalg.eigvals', 'fwdbwd-f32'):
        'unsupported: aten.alias.default (torch.complex64), aten.linalg_eig.default',
    ('linalg.eigvalsh', 'fwd-f32'):
        'unsupported: aten._linalg_eigh.default',
    ('linalg.eigvalsh', 'fwdbwd-f32'):
        'unsupported: aten._linalg_eigh.default',
    ('linalg.householder_product', 'fwd-f32'):
        'unsupported: aten.linalg_householder_product.default',
    ('linalg.householder_product', 'fwdbwd-f32'):
        'unsupported: aten.linalg_householder_product.default',
    ('linalg.inv', 'fwd-f32'):
        'unsupported: aten.linalg_inv_ex.default, with_effects',
    ('linalg.inv', 'fwdbwd-f32'):
        'unsupported: aten.linalg_inv_ex.default, with_effects',
    ('linalg.inv_ex', 'fwd-f32'):
        'unsupported: aten.linalg_inv_ex.default',
    ('linalg.inv_ex', 'fwdbwd-f32'):
        'unsupported: aten.linalg_inv_ex.default',
    ('linalg.ldl_factor', 'fwd-f32'):
        'unsupported: aten.linalg_ldl_factor_ex.default, with_effects',
    ('linalg.ldl_factor_ex', 'fwd-f32'):
        'unsupported: aten.linalg_ldl_factor_ex.default',
    ('linalg.ldl_solve', 'fwd-f32'):
        'unsupported: aten.linalg_ldl_solve.default',
    ('linalg.lu', 'fwd-f32'):
        'unsupported: aten.linalg_lu.default',
    ('linalg.lu', 'fwdbwd-f32'):
        'unsupported: aten.linalg_lu.default',
    ('linalg.lu_factor', 'fwd-f32'):
        'unsupported: aten.linalg_lu_factor_ex.default, with_effects',
    ('linalg.lu_factor', 'fwdbwd-f32'):
        'unsupported: aten.linalg_lu_factor_ex.default, with_effects',
    ('linalg.lu_factor_ex', 'fwd-f32'):
        'unsupported: aten.linalg_lu_factor_ex.default',
    ('linalg.lu_factor_ex', 'fwdbwd-f32'):
        'unsupported: aten.linalg_lu_factor_ex.default',
    ('linalg.lu_solve', 'fwd-f32'):
        'unsupported: aten.linalg_lu_solve.default',
    ('linalg.lu_solve', 'fwdbwd-f32'):
        'unsupported: aten.linalg_lu_solve.default',
    ('linalg.matrix_rank', 'fwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('linalg.matrix_rank.hermitian', 'fwd-f32'):
        'unsupported: aten._linalg_eigh.default',
    ('linalg.matrix_sqrth', 'fwd-f32'):
        'unsupported: aten.linalg_matrix_sqrth.default',
    ('linalg.matrix_sqrth', 'fwdbwd-f32'):
        'unsupported: aten.linalg_matrix_sqrth.default',
    ('linalg.pinv', 'fwd-f32'):
        'unsupported: aten.linalg_pinv.atol_rtol_tensor',
    ('linalg.pinv', 'fwdbwd-f32'):
        'unsupported: aten.linalg_pinv.atol_rtol_tensor',
    ('linalg.pinv.hermitian', 'fwd-f32'):
        'unsupported: aten.linalg_pinv.atol_rtol_tensor',
    ('linalg.pinv.hermitian', 'fwdbwd-f32'):
        'unsupported: aten.linalg_pinv.atol_rtol_tensor',
    ('linalg.pinv.singular', 'fwd-f32'):
        'unsupported: aten.linalg_pinv.atol_rtol_tensor',
    ('linalg.pinv.singular', 'fwdbwd-f32'):
        'unsupported: aten.linalg_pinv.atol_rtol_tensor',
    ('linalg.polar', 'fwd-f32'):
        'unsupported: aten.linalg_polar.default',
    ('linalg.polar', 'fwdbwd-f32'):
        'unsupported: aten.linalg_polar.default',
    ('linalg.qr', 'fwd-f32'):
        'unsupported: aten.linalg_qr.default',
    ('linalg.qr', 'fwdbwd-f32'):
        'unsupported: aten.linalg_qr.default',
    ('linalg.slogdet', 'fwd-f32'):
        'unsupported: aten._linalg_slogdet.default',
    ('linalg.slogdet', 'fwdbwd-f32'):
        'unsupported: aten._linalg_slogdet.default',
    ('linalg.solve', 'fwd-f32'):
        'unsupported: aten._linalg_solve_ex.default, with_effects',
    ('linalg.solve', 'fwdbwd-f32'):
        'unsupported: aten._linalg_solve_ex.default, with_effects',
    ('linalg.solve_ex', 'fwd-f32'):
        'unsupported: aten._linalg_solve_ex.default',
    ('linalg.solve_ex', 'fwdbwd-f32'):
        'unsupported: aten._linalg_solve_ex.default',
    ('linalg.svd', 'fwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('linalg.svd', 'fwdbwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('linalg.svdvals', 'fwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('linalg.svdvals', 'fwdbwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('linalg.tensorinv', 'fwd-f32'):
        'unsupported: aten.linalg_inv_ex.default, with_effects',
    ('linalg.tensorinv', 'fwdbwd-f32'):
        'unsupported: aten.linalg_inv_ex.default, with_effects',
    ('linalg.tensorsolve', 'fwd-f32'):
        'unsupported: aten._linalg_solve_ex.default, with_effects',
    ('linalg.tensorsolve', 'fwdbwd-f32'):
        'unsupported: aten._linalg_solve_ex.default, with_effects',
    ('logdet', 'fwd-f32'):
        'unsupported: aten._linalg_slogdet.default',
    ('logdet', 'fwdbwd-f32'):
        'unsupported: aten._linalg_slogdet.default',
    ('lu', 'fwd-f32'):
        'unsupported: aten.linalg_lu_factor_ex.default',
    ('lu', 'fwdbwd-f32'):
        'unsupported: aten.linalg_lu_factor_ex.default',
    ('lu_solve', 'fwd-f32'):
        'unsupported: aten.linalg_lu_solve.default',
    ('lu_solve', 'fwdbwd-f32'):
        'unsupported: aten.linalg_lu_solve.default',
    ('lu_unpack', 'fwd-f32'):
        'unsupported: aten.lu_unpack.default',
    ('lu_unpack', 'fwdbwd-f32'):
        'unsupported: aten.lu_unpack.default',
    ('masked_select', 'fwd-f32'):
        'unsupported: aten.masked_select.default, aten.sym_size.int, ge, le',
    ('masked_select', 'fwdbwd-f32'):
        'unsupported: aten.masked_select.default, aten.sym_size.int, ge, le',
    ('masked_select', 'fwd-bf16'):
        'unsupported: aten.masked_select.default, aten.sym_size.int, ge, le',
    ('matrix_exp', 'fwd-f32'):
        'unsupported: aten.linalg_matrix_exp.default',
    ('matrix_exp', 'fwdbwd-f32'):
        'unsupported: aten.linalg_matrix_exp.default',
    ('matrix_exp', 'fwd-bf16'):
        'unsupported: aten.linalg_matrix_exp.default',
    ('mode', 'fwd-f32'):
        'unsupported: aten.mode.default',
    ('mode', 'fwdbwd-f32'):
        'unsupported: aten.mode.default',
    ('mode', 'fwd-bf16'):
        'unsupported: aten.mode.default',
    ('narrow', 'fwd-f32'):
        'unsupported: add, and_, aten._local_scalar_dense.default, aten.slice.Tensor (symbolic shape), eq, lt, mul, sym_ite',
    ('nn.functional.adaptive_avg_pool3d', 'fwdbwd-f32'):
        'unsupported: aten._adaptive_avg_pool3d_backward.default',
    ('nn.functional.adaptive_max_pool3d', 'fwdbwd-f32'):
        'unsupported: aten.adaptive_max_pool3d_backward.default',
    ('nn.functional.avg_pool3d', 'fwdbwd-f32'):
        'unsupported: aten.avg_pool3d_backward.default',
    ('nn.functional.embedding_bag', 'fwd-f32'):
        'unsupported: aten._embedding_bag_forward_only.default',
    ('nn.functional.embedding_bag', 'fwdbwd-f32'):
        'unsupported: aten._embedding_bag.default',
    ('nn.functional.embedding_bag', 'fwd-bf16'):
        'unsupported: aten._embedding_bag_forward_only.default',
    ('nn.functional.grid_sample', 'fwdbwd-f32'):
        'unsupported: aten.grid_sampler_2d_backward.default',
    ('nn.functional.linear_cross_entropy.chunked', 'fwd-f32'):
        'unsupported: torch_nn._linear_cross_entropy_batch_chunked.default',
    ('nn.functional.linear_cross_entropy.chunked', 'fwdbwd-f32'):
        'unsupported: torch_nn._linear_cross_entropy_batch_chunked.default',
    ('nn.functional.linear_cross_entropy.chunked', 'fwd-bf16'):
        'unsupported: torch_nn._linear_cross_entropy_batch_chunked.default',
    ('nn.functional.linear_cross_entropy.chunked_none', 'fwd-f32'):
        'unsupported: torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default',
    ('nn.functional.linear_cross_entropy.chunked_none', 'fwdbwd-f32'):
        'unsupported: torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default',
    ('nn.functional.linear_cross_entropy.chunked_none', 'fwd-bf16'):
        'unsupported: torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default',
    ('nn.functional.max_pool3d', 'fwdbwd-f32'):
        'unsupported: aten.max_pool3d_with_indices_backward.default',
    ('nn.functional.pad.replicate', 'fwdbwd-f32'):
        'unsupported: aten.replication_pad1d_backward.default',
    ('nn.functional.pad.replicate_negative', 'fwdbwd-f32'):
        'unsupported: aten.replication_pad2d_backward.default',
    ('nn.functional.pdist', 'fwdbwd-f32'):
        'unsupported: aten._pdist_backward.default',
    ('nonzero', 'fwd-f32'):
        'unsupported: aten.nonzero.default, aten.sym_size.int, ge, le',
    ('nonzero', 'fwd-bf16'):
        'unsupported: aten.nonzero.default, aten.sym_size.int, ge, le',
    ('norm.nuc', 'fwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('norm.nuc', 'fwdbwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('ormqr', 'fwd-f32'):
        'unsupported: aten.ormqr.default',
    ('ormqr', 'fwdbwd-f32'):
        'unsupported: aten.ormqr.default',
    ('pinverse', 'fwd-f32'):
        'unsupported: aten.linalg_pinv.atol_rtol_tensor',
    ('pinverse', 'fwdbwd-f32'):
        'unsupported: aten.linalg_pinv.atol_rtol_tensor',
    ('polar', 'fwd-f32'):
        'unsupported: aten.polar.default',
    ('polar', 'fwdbwd-f32'):
        'unsupported: aten.alias.default (torch.complex64), aten.polar.default',
    ('special.airy_ai', 'fwd-f32'):
        'unsupported: aten.special_airy_ai.default',
    ('stft', 'fwd-f32'):
        'unsupported: aten._fft_r2c.default, aten.permute.default (torch.complex64), aten.squeeze.dim (torch.complex64)',
    ('stft', 'fwdbwd-f32'):
        'unsupported: aten._fft_r2c.default, aten.permute.default (torch.complex64), aten.squeeze.dim (torch.complex64)',
    ('svd', 'fwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('svd', 'fwdbwd-f32'):
        'unsupported: aten._linalg_svd.default',
    ('take', 'fwd-f32'):
        'unsupported: aten._local_scalar_dense.default',
    ('tensor_split', 'fwd-f32'):
        'unsupported: aten._local_scalar_dense.default, aten.slice.Tensor (symbolic shape), aten.sym_size.int, aten.sym_storage_offset.default, ge, le',
    ('tensor_split', 'fwdbwd-f32'):
        'unsupported: aten._local_scalar_dense.default, aten.slice.Tensor (symbolic shape), aten.sym_size.int, aten.sym_storage_offset.default, ge, le',
    ('tensor_split', 'fwd-bf16'):
        'unsupported: aten._local_scalar_dense.default, aten.slice.Tensor (symbolic shape), aten.sym_size.int, aten.sym_storage_offset.default, ge, le',
    ('torch.ops.aten._scaled_dot_product_flash_attention_for_cpu', 'fwdbwd-f32'):
        'unsupported: aten._scaled_dot_product_flash_attention_for_cpu_backward.default',
    ('unique', 'fwd-f32'):
        'unsupported: aten._unique2.default, aten.sym_size.int, ge, le',
    ('unique', 'fwd-bf16'):
        'unsupported: aten._unique2.default, aten.sym_size.int, ge, le',
    ('unique_consecutive', 'fwd-f32'):
        'unsupported: aten.sym_size.int, aten.unique_consecutive.default, ge, le',
    ('unique_consecutive', 'fwd-bf16'):
        'unsupported: aten.sym_size.int, aten.unique_consecutive.default, ge, le',
    ('view_as_complex', 'fwd-f32'):
        'unsupported: aten.view_as_complex.default',
    ('view_as_complex', 'fwdbwd-f32'):
        'unsupported: aten.view_as_complex.default',
}

# the samples (indices) each pair failed on in the run that made the list
XFAIL_SAMPLES: Dict[Tuple[str, str], Tuple[int, ...]] = {
    ('_segment_reduce.lengths', 'fwdbwd-f32'): (0,),
    ('_segment_reduce.offsets', 'fwdbwd-f32'): (0,),
    ('_upsample_bilinear2d_aa', 'fwd-f32'): (0, 1, 2),
    ('_upsample_bilinear2d_aa', 'fwdbwd-f32'): (0,),
    ('argwhere', 'fwd-f32'): (0, 1, 2),
    ('argwhere', 'fwd-bf16'): (0,),
    ('cdist', 'fwdbwd-f32'): (0,),
    ('cdouble', 'fwd-f32'): (0, 1, 2),
    ('cdouble', 'fwdbwd-f32'): (0,),
    ('cdouble', 'fwd-bf16'): (0,),
    ('cfloat', 'fwd-f32'): (0, 1, 2),
    ('cfloat', 'fwdbwd-f32'): (0,),
    ('cfloat', 'fwd-bf16'): (0,),
    ('chalf', 'fwd-f32'): (0, 1, 2),
    ('chalf', 'fwdbwd-f32'): (0,),
    ('chalf', 'fwd-bf16'): (0,),
    ('complex', 'fwd-f32'): (0, 1, 2),
    ('complex', 'fwdbwd-f32'): (0,),
    ('fft.fft', 'fwd-f32'): (0, 1, 2),
    ('fft.fft', 'fwdbwd-f32'): (0,),
    ('fft.fft2', 'fwd-f32'): (0, 1, 2),
    ('fft.fft2', 'fwdbwd-f32'): (0,),
    ('fft.fftn', 'fwd-f32'): (0, 1, 2),
    ('fft.fftn', 'fwdbwd-f32'): (0,),
    ('fft.hfft', 'fwd-f32'): (0, 1, 2),
    ('fft.hfft', 'fwdbwd-f32'): (0,),
    ('fft.hfft2', 'fwd-f32'): (0, 1, 2),
    ('fft.hfft2', 'fwdbwd-f32'): (0,),
    ('fft.hfftn', 'fwd-f32'): (0, 1, 2),
    ('fft.hfftn', 'fwdbwd-f32'): (0,),
    ('fft.ifft', 'fwd-f32'): (0, 1, 2),
    ('fft.ifft', 'fwdbwd-f32'): (0,),
    ('fft.ifft2', 'fwd-f32'): (0, 1, 2),
    ('fft.ifft2', 'fwdbwd-f32'): (0,),
    ('fft.ifftn', 'fwd-f32'): (0, 1, 2),
    ('fft.ifftn', 'fwdbwd-f32'): (0,),
    ('fft.ihfft', 'fwd-f32'): (0, 1, 2),
    ('fft.ihfft', 'fwdbwd-f32'): (0,),
    ('fft.ihfft2', 'fwd-f32'): (0, 1, 2),
    ('fft.ihfft2', 'fwdbwd-f32'): (0,),
    ('fft.ihfftn', 'fwd-f32'): (0, 1, 2),
    ('fft.ihfftn', 'fwdbwd-f32'): (0,),
    ('fft.irfft', 'fwd-f32'): (0, 1, 2),
    ('fft.irfft', 'fwdbwd-f32'): (0,),
    ('fft.irfft2', 'fwd-f32'): (0, 1, 2),
    ('fft.irfft2', 'fwdbwd-f32'): (0,),
    ('fft.irfftn', 'fwd-f32'): (0, 1, 2),
    ('fft.irfftn', 'fwdbwd-f32'): (0,),
    ('fft.rfft', 'fwd-f32'): (0, 1, 2),
    ('fft.rfft', 'fwdbwd-f32'): (0,),
    ('fft.rfft2', 'fwd-f32'): (0, 1, 2),
    ('fft.rfft2', 'fwdbwd-f32'): (0,),
    ('fft.rfftn', 'fwd-f32'): (0, 1, 2),
    ('fft.rfftn', 'fwdbwd-f32'): (0,),
    ('geqrf', 'fwd-f32'): (0, 1, 2),
    ('grid_sampler_2d', 'fwdbwd-f32'): (0,),
    ('grid_sampler_3d', 'fwd-f32'): (0, 1, 2),
    ('grid_sampler_3d', 'fwdbwd-f32'): (0,),
    ('grid_sampler_3d', 'fwd-bf16'): (0,),
    ('hash_tensor', 'fwd-f32'): (0, 1, 2),
    ('hash_tensor', 'fwd-bf16'): (0,),
    ('histogram', 'fwd-f32'): (0, 1, 2),
    ('histogramdd', 'fwd-f32'): (0, 1, 2),
    ('linalg.cholesky', 'fwd-f32'): (0, 1, 2),
    ('linalg.cholesky', 'fwdbwd-f32'): (0,),
    ('linalg.cholesky_ex', 'fwd-f32'): (0, 1, 2),
    ('linalg.cholesky_ex', 'fwdbwd-f32'): (0,),
    ('linalg.cond', 'fwd-f32'): (0, 1, 2),
    ('linalg.cond', 'fwdbwd-f32'): (0,),
    ('linalg.det', 'fwd-f32'): (0, 1, 2),
    ('linalg.det', 'fwdbwd-f32'): (0,),
    ('linalg.eig', 'fwd-f32'): (0, 1, 2),
    ('linalg.eigh', 'fwd-f32'): (0, 1, 2),
    ('linalg.eigh', 'fwdbwd-f32'): (0,),
    ('linalg.eigvals', 'fwd-f32'): (0, 1, 2),
    ('linalg.eigvals', 'fwdbwd-f32'): (0,),
    ('linalg.eigvalsh', 'fwd-f32'): (0, 1, 2),
    ('linalg.eigvalsh', 'fwdbwd-f32'): (0,),
    ('linalg.householder_product', 'fwd-f32'): (0, 1, 2),
    ('linalg.householder_product', 'fwdbwd-f32'): (0,),
    ('linalg.inv', 'fwd-f32'): (0, 1, 2),
    ('linalg.inv', 'fwdbwd-f32'): (0,),
    ('linalg.inv_ex', 'fwd-f32'): (0, 1, 2),
    ('linalg.inv_ex', 'fwdbwd-f32'): (0,),
    ('linalg.ldl_factor', 'fwd-f32'): (0, 1, 2),
    ('linalg.ldl_factor_ex', 'fwd-f32'): (0, 1, 2),
    ('linalg.ldl_solve', 'fwd-f32'): (0, 1, 2),
    ('linalg.lu', 'fwd-f32'): (0, 1, 2),
    ('linalg.lu', 'fwdbwd-f32'): (0,),
    ('linalg.lu_factor', 'fwd-f32'): (0, 1, 2),
    ('linalg.lu_factor', 'fwdbwd-f32'): (0,),
    ('linalg.lu_factor_ex', 'fwd-f32'): (0, 1, 2),
    ('linalg.lu_factor_ex', 'fwdbwd-f32'): (0,),
    ('linalg.lu_solve', 'fwd-f32'): (0, 1, 2),
    ('linalg.lu_solve', 'fwdbwd-f32'): (0,),
    ('linalg.matrix_rank', 'fwd-f32'): (0,),
    ('linalg.matrix_rank.hermitian', 'fwd-f32'): (0,),
    ('linalg.matrix_sqrth', 'fwd-f32'): (0, 1, 2),
    ('linalg.matrix_sqrth', 'fwdbwd-f32'): (0,),
    ('linalg.pinv', 'fwd-f32'): (0, 1, 2),
    ('linalg.pinv', 'fwdbwd-f32'): (0,),
    ('linalg.pinv.hermitian', 'fwd-f32'): (0, 1, 2),
    ('linalg.pinv.hermitian', 'fwdbwd-f32'): (0,),
    ('linalg.pinv.singular', 'fwd-f32'): (0, 1, 2),
    ('linalg.pinv.singular', 'fwdbwd-f32'): (0,),
    ('linalg.polar', 'fwd-f32'): (0, 1, 2),
    ('linalg.polar', 'fwdbwd-f32'): (0,),
    ('linalg.qr', 'fwd-f32'): (0, 1, 2),
    ('linalg.qr', 'fwdbwd-f32'): (0,),
    ('linalg.slogdet', 'fwd-f32'): (0, 1, 2),
    ('linalg.slogdet', 'fwdbwd-f32'): (0,),
    ('linalg.solve', 'fwd-f32'): (0, 1, 2),
    ('linalg.solve', 'fwdbwd-f32'): (0,),
    ('linalg.solve_ex', 'fwd-f32'): (0, 1, 2),
    ('linalg.solve_ex', 'fwdbwd-f32'): (0,),
    ('linalg.svd', 'fwd-f32'): (0, 1, 2),
    ('linalg.svd', 'fwdbwd-f32'): (0,),
    ('linalg.svdvals', 'fwd-f32'): (0, 1, 2),
    ('linalg.svdvals', 'fwdbwd-f32'): (0,),
    ('linalg.tensorinv', 'fwd-f32'): (0, 1),
    ('linalg.tensorinv', 'fwdbwd-f32'): (0,),
    ('linalg.tensorsolve', 'fwd-f32'): (0, 1, 2),
    ('linalg.tensorsolve', 'fwdbwd-f32'): (0,),
    ('logdet', 'fwd-f32'): (0, 1, 2),
    ('logdet', 'fwdbwd-f32'): (0,),
    ('lu', 'fwd-f32'): (0, 1, 2),
    ('lu', 'fwdbwd-f32'): (0,),
    ('lu_solve', 'fwd-f32'): (0, 1, 2),
    ('lu_solve', 'fwdbwd-f32'): (0,),
    ('lu_unpack', 'fwd-f32'): (0, 1, 2),
    ('lu_unpack', 'fwdbwd-f32'): (0,),
    ('masked_select', 'fwd-f32'): (0, 1),
    ('masked_select', 'fwdbwd-f32'): (0,),
    ('masked_select', 'fwd-bf16'): (0,),
    ('matrix_exp', 'fwd-f32'): (0, 1),
    ('matrix_exp', 'fwdbwd-f32'): (0,),
    ('matrix_exp', 'fwd-bf16'): (0,),
    ('mode', 'fwd-f32'): (0, 1, 2),
    ('mode', 'fwdbwd-f32'): (0,),
    ('mode', 'fwd-bf16'): (0,),
    ('narrow', 'fwd-f32'): (1,),
    ('nn.functional.adaptive_avg_pool3d', 'fwdbwd-f32'): (0,),
    ('nn.functional.adaptive_max_pool3d', 'fwdbwd-f32'): (0,),
    ('nn.functional.avg_pool3d', 'fwdbwd-f32'): (0,),
    ('nn.functional.embedding_bag', 'fwd-f32'): (0, 1, 2),
    ('nn.functional.embedding_bag', 'fwdbwd-f32'): (0,),
    ('nn.functional.embedding_bag', 'fwd-bf16'): (0,),
    ('nn.functional.grid_sample', 'fwdbwd-f32'): (0,),
    ('nn.functional.linear_cross_entropy.chunked', 'fwd-f32'): (0, 1),
    ('nn.functional.linear_cross_entropy.chunked', 'fwdbwd-f32'): (0,),
    ('nn.functional.linear_cross_entropy.chunked', 'fwd-bf16'): (0,),
    ('nn.functional.linear_cross_entropy.chunked_none', 'fwd-f32'): (0, 1),
    ('nn.functional.linear_cross_entropy.chunked_none', 'fwdbwd-f32'): (0,),
    ('nn.functional.linear_cross_entropy.chunked_none', 'fwd-bf16'): (0,),
    ('nn.functional.max_pool3d', 'fwdbwd-f32'): (0,),
    ('nn.functional.pad.replicate', 'fwdbwd-f32'): (0,),
    ('nn.functional.pad.replicate_negative', 'fwdbwd-f32'): (0,),
    ('nn.functional.pdist', 'fwdbwd-f32'): (0,),
    ('nonzero', 'fwd-f32'): (0, 1, 2),
    ('nonzero', 'fwd-bf16'): (0,),
    ('norm.nuc', 'fwd-f32'): (0, 1),
    ('norm.nuc', 'fwdbwd-f32'): (0,),
    ('ormqr', 'fwd-f32'): (0, 1, 2),
    ('ormqr', 'fwdbwd-f32'): (0,),
    ('pinverse', 'fwd-f32'): (0, 1, 2),
    ('pinverse', 'fwdbwd-f32'): (0,),
    ('polar', 'fwd-f32'): (0, 1, 2),
    ('polar', 'fwdbwd-f32'): (0,),
    ('special.airy_ai', 'fwd-f32'): (0, 1, 2),
    ('stft', 'fwd-f32'): (0, 1, 2),
    ('stft', 'fwdbwd-f32'): (0,),
    ('svd', 'fwd-f32'): (0, 1, 2),
    ('svd', 'fwdbwd-f32'): (0,),
    ('take', 'fwd-f32'): (2,),
    ('tensor_split', 'fwd-f32'): (0, 2),
    ('tensor_split', 'fwdbwd-f32'): (0,),
    ('tensor_split', 'fwd-bf16'): (0,),
    ('torch.ops.aten._scaled_dot_product_flash_attention_for_cpu', 'fwdbwd-f32'): (0,),
    ('unique', 'fwd-f32'): (0, 1, 2),
    ('unique', 'fwd-bf16'): (0,),
    ('unique_consecutive', 'fwd-f32'): (0, 1, 2),
    ('unique_consecutive', 'fwd-bf16'): (0,),
    ('view_as_complex', 'fwd-f32'): (0,),
    ('view_as_complex', 'fwdbwd-f32'): (0,),
}
