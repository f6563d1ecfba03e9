export * from '../../helpers/proxy.mjs';
