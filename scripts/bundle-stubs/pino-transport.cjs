'use strict';
// Stands in for pino's lib/transport.js in leasejob's bundle (scripts/bundle.mjs): transports run
// in worker threads, and loading them costs every start; leasejob never uses one.
module.exports = function transport() {
  throw new Error('pino transports are not included in the leasejob bundle');
};
